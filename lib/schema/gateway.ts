/**
 * Schemas of the gateway area.
 *
 * @module
 */
export {};
