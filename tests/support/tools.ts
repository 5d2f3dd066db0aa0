/**
 * Tool definitions the tests offer their harnesses.
 *
 * @module
 */

/** An OpenAI function tool that adds `a` and `b`. */
export const ADD_TOOL = {
  type: "function" as const,
  function: {
    name: "add",
    description: "Adds two numbers.",
    parameters: {
      type: "object",
      properties: { a: { type: "number" }, b: { type: "number" } },
      required: ["a", "b"],
    },
  },
};
