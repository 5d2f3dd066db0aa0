/**
 * A safe arithmetic evaluator: the calculator tool of the toy environment.
 *
 * Grammar: numbers, `+ - * /`, unary minus, parentheses. No identifiers, no `eval`.
 *
 * @module
 */

/** Raised for an expression the calculator cannot evaluate; the message says where. */
export class CalculatorError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "CalculatorError";
  }
}

/**
 * Evaluates an arithmetic expression exactly as a calculator tool would.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { evaluateExpression } from "./calculator.ts";
 * assert.equal(evaluateExpression("(17 + 25) * 3"), 126);
 * ```
 */
export function evaluateExpression(expression: string): number {
  if (expression.length > 500) throw new CalculatorError("expression longer than 500 characters");
  let pos = 0;
  const skip = () => {
    while (pos < expression.length && /\s/.test(expression[pos])) pos++;
  };
  const peek = () => {
    skip();
    return expression[pos];
  };
  const fail = (what: string): never => {
    throw new CalculatorError(`${what} at position ${pos} in ${JSON.stringify(expression)}`);
  };
  const parsePrimary = (): number => {
    const c = peek();
    if (c === "(") {
      pos++;
      const value = parseSum();
      if (peek() !== ")") fail("expected ')'");
      pos++;
      return value;
    }
    if (c === "-") {
      pos++;
      return -parsePrimary();
    }
    if (c === "+") {
      pos++;
      return parsePrimary();
    }
    const match = /^\d+(\.\d+)?/.exec(expression.slice(pos));
    if (!match) return fail("expected a number");
    pos += match[0].length;
    return Number(match[0]);
  };
  const parseProduct = (): number => {
    let value = parsePrimary();
    for (let c = peek(); c === "*" || c === "/"; c = peek()) {
      pos++;
      const rhs = parsePrimary();
      if (c === "/" && rhs === 0) fail("division by zero");
      value = c === "*" ? value * rhs : value / rhs;
    }
    return value;
  };
  const parseSum = (): number => {
    let value = parseProduct();
    for (let c = peek(); c === "+" || c === "-"; c = peek()) {
      pos++;
      const rhs = parseProduct();
      value = c === "+" ? value + rhs : value - rhs;
    }
    return value;
  };
  const value = parseSum();
  if (peek() !== undefined) fail("unexpected character");
  return value;
}

/** Formats a calculator result the way the tool returns it (integers without a decimal point). */
export function formatNumber(value: number): string {
  return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(6)));
}
