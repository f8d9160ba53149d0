/**
 * How the objects count the RPCs they serve (src/kernel/rpc-meter.ts): a call from outside is one,
 * whatever the method calls inside its object, and what the runtime or the object itself calls is
 * none.
 */
import { describe, expect, it } from "vitest";
import { meteredRpcs } from "../../src/kernel/rpc-meter";
import { newMeter, requestsCounted } from "../../src/kernel/sql-meter";

class Calls {
  readonly fromField = () => this.inner();
  outer(): number {
    return this.inner() + this.inner();
  }
  inner(): number {
    return 1;
  }
  async afterAwait(): Promise<number> {
    await null;
    return this.outer();
  }
  get twice(): number {
    return this.inner() * 2;
  }
  figures(): number {
    return this.outer();
  }
  alarm(): void {
    this.outer();
  }
  fetch(): Response {
    return new Response(String(this.outer()));
  }
}

describe("meteredRpcs", () => {
  it("counts each call from outside once, and none of the calls the object makes itself", async () => {
    const meter = newMeter();
    const object = new Calls();
    const metered = meteredRpcs(object, meter, ["figures"]);
    const isolate = requestsCounted();
    expect(metered.outer()).toBe(2);
    expect(meter.rpcs).toBe(1);
    expect(await metered.afterAwait()).toBe(2);
    expect(meter.rpcs).toBe(2);
    // A field's closure, a getter, a method named uncounted and the runtime's handlers: none.
    expect(metered.fromField()).toBe(1);
    expect(metered.twice).toBe(2);
    expect(metered.figures()).toBe(2);
    metered.alarm();
    expect(await metered.fetch().text()).toBe("2");
    expect(meter.rpcs).toBe(2);
    expect(requestsCounted() - isolate).toBe(2);
  });

  it("is the object to whoever holds it: its class, its fields, Object.prototype's methods", () => {
    const object = new Calls();
    const metered = meteredRpcs(object, newMeter(), []);
    expect(metered).toBeInstanceOf(Calls);
    expect(metered.constructor).toBe(Calls);
    expect(metered.fromField).toBe(object.fromField);
    expect(metered.outer).toBe(metered.outer);
    // What workerd refuses over RPC, by identity with Object.prototype's.
    expect(metered.toString).toBe(Object.prototype.toString);
    (metered as unknown as { extra: number }).extra = 5;
    expect(Object.hasOwn(object, "extra")).toBe(true);
  });
});
