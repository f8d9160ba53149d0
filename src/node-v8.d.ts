/** The part of node:v8 (workerd, nodejs_compat) shardq uses, without pulling Node's types into Worker code. */
declare module "node:v8" {
  export function serialize(value: unknown): Uint8Array;
  export function deserialize(buffer: ArrayBufferView): unknown;
}
