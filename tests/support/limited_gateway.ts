/**
 * A gateway for the connection-flood attack tests: started in-process on an in-memory store
 * (`Deno.args[0]`: deadlines as JSON), it prints its URL and its admin key, then serves until
 * killed. Run it under a low `ulimit -n` to show the descriptor reserve at work.
 *
 * @module
 */
import { startGateway } from "../../lib/gateway/server.ts";

const gateway = await startGateway({
  adminKey: "ra_limited_gateway_key",
  deadlines: JSON.parse(Deno.args[0] ?? "{}"),
});
console.log(gateway.url);
