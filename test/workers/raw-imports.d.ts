// Vite's raw text imports, e.g. `import toml from "../../wrangler.toml?raw"` (test/workers/binding-names.test.ts).
// A file of its own: a wildcard module declaration needs a script, not a module like env.d.ts.
declare module "*?raw" {
  const text: string;
  export default text;
}
