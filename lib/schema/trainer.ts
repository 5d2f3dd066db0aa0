/**
 * Schemas of the trainer area.
 *
 * @module
 */
export {};
