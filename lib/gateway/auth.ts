/**
 * The gateway's credentials (defined in `lib/http/credentials.ts`, shared by every service).
 *
 * @module
 */
export * from "../http/credentials.ts";
