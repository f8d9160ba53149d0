/**
 * How the producer binding refuses a call without throwing.
 *
 * An error thrown (or a promise rejected) by a WorkerEntrypoint method does reach the
 * caller, but workerd also reports it as the callee's own uncaught exception: `wrangler dev`
 * prints `✘ [ERROR] Uncaught TypeError: ...` with the stack in shardq's log, and across two
 * `wrangler dev` processes (a user's Worker under `shardq dev`) workerd then cancels the
 * callee's side of the call as hung ("The Workers runtime canceled this request because it
 * detected that your Worker's code had hung"). A refused send is the caller's mistake, not
 * shardq's crash: Cloudflare's own binding rejects the caller's promise and logs nothing.
 *
 * So a refusal resolves the RPC call with a thenable instead: a plain object whose `then`
 * crosses RPC as a stub. The caller's promise adopts it as any promise adopts a thenable,
 * calling `then(resolve, reject)`; that call comes back here over RPC, and `reject(error)`
 * goes back to the caller as an RPC call of its own carrying the error, whose name and
 * message survive the trip as for any Error passed over RPC. The caller's `await` throws
 * exactly the error a throw here would have given it; nothing here ever throws.
 *
 * Promises on this side adopt the value too (the method's own async return, each `await`
 * on the way): `then` called with `this` the object itself is such a local adoption, and
 * resolves the adopting promise with the object while `then` reads as absent for that one
 * read, so that the object arrives whole at the serializer, which reads `then` again and
 * sends the stub. Called directly in this isolate (not over RPC) a refused method therefore
 * resolves with this object: only RPC callers see the rejection.
 */
export function refusal(error: Error): object {
  const value: { then?: unknown } = {};
  // Set while a promise on this side adopts `value`: its next read of `then` sees none.
  let adopting = false;
  function then(this: unknown, resolve: (v: unknown) => unknown, reject: (e: unknown) => unknown): unknown {
    if (this === value) {
      adopting = true;
      resolve(value);
      return undefined;
    }
    // Over RPC: `reject` is the caller's own function, reached through a stub. Awaited so
    // that the stub stays live until the call is delivered; a caller gone meanwhile has
    // nobody left to tell.
    return Promise.resolve()
      .then(() => reject(error))
      .then(
        () => undefined,
        () => undefined,
      );
  }
  Object.defineProperty(value, "then", {
    enumerable: true,
    get() {
      if (!adopting) return then;
      adopting = false;
      return undefined;
    },
  });
  return value;
}
