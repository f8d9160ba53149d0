// Kept while openapi-results.test.ts still imports from here; the helpers live in helpers.ts.
export { addConsumer, eventually, fakeConsumer } from "./helpers";
