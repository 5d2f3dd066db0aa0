/**
 * Schemas of the harness area.
 *
 * @module
 */
export {};
