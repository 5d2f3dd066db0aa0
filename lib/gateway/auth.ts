/**
 * The gateway's credentials (defined in `lib/http/credentials.ts`, shared by every service).
 *
 * @module
 */
export {
  authorize,
  CAPABILITY_PREFIX,
  capabilityToken,
  classifyKey,
  constantTimeEqual,
  type CredentialKind,
  keyFromHeaders,
  type Principal,
  randomKey,
  readOrCreateKey,
  type ServiceKeys,
  verifyAdminKey,
  verifyCapability,
} from "../http/credentials.ts";
