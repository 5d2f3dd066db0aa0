/**
 * Schemas of the proxy area.
 *
 * @module
 */
export {};
