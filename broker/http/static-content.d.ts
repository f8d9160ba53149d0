// Workers Sites: wrangler adds this module (the bucket's file -> KV key map) when wrangler.toml has a [site].
declare module "__STATIC_CONTENT_MANIFEST" {
  const manifest: string;
  export default manifest;
}
