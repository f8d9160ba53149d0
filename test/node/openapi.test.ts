// The OpenAPI description is valid OpenAPI 3.1: the same check CI runs
// (npm run check:openapi), on the document the Worker builds. Which routes it describes and
// with which scopes is test/workers/openapi.test.ts; its answers, openapi-results.test.ts.
import { beforeAll, describe, expect, it } from "vitest";
import { buildOpenApiDocument, openApiProblems } from "../../scripts/check-openapi.mjs";

let document: Record<string, any>;

beforeAll(async () => {
  document = await buildOpenApiDocument();
});

describe("the OpenAPI description", () => {
  it("is a valid OpenAPI 3.1 document: its schema, its $refs, its path parameters", async () => {
    expect(document.openapi).toBe("3.1.0");
    expect(Object.keys(document.paths).length).toBeGreaterThan(15);
    expect(await openApiProblems(document)).toEqual([]);
  });

  it("would be refused broken: the check is not one that passes anything", async () => {
    const noTitle = structuredClone(document);
    delete noTitle.info.title;
    expect((await openApiProblems(noTitle)).join("\n")).toContain("title");

    const badRef = structuredClone(document);
    badRef.paths["/healthz"].get.responses["200"] = { $ref: "#/components/responses/NoSuchThing" };
    expect(await openApiProblems(badRef)).toEqual(["Can't resolve #/components/responses/NoSuchThing"]);

    const lostParam = structuredClone(document);
    const op = lostParam.paths["/accounts/{account_id}/queues"].get;
    op.parameters = op.parameters.filter((p: { $ref?: string }) => p.$ref !== "#/components/parameters/account_id");
    expect((await openApiProblems(lostParam)).join("\n")).toContain(
      'GET /accounts/{account_id}/queues: path parameters declared [], the path has ["account_id"]',
    );
  });
});
