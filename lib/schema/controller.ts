/**
 * Schemas of the controller area.
 *
 * @module
 */
export {};
