"""Shunting-yard conversion and RPN evaluation."""

from rpncalc.tokens import tokenize

PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def to_rpn(tokens):
    """Infix tokens to reverse Polish notation (left-associative operators)."""
    out = []
    stack = []
    for tok in tokens:
        if isinstance(tok, int):
            out.append(tok)
        elif tok == "(":
            stack.append(tok)
        elif tok == ")":
            while stack and stack[-1] != "(":
                out.append(stack.pop())
            if not stack:
                raise ValueError("unbalanced parentheses")
            stack.pop()
        else:
            while stack and stack[-1] != "(" and PRECEDENCE[stack[-1]] >= PRECEDENCE[tok]:
                out.append(stack.pop())
            stack.append(tok)
    while stack:
        op = stack.pop()
        if op == "(":
            raise ValueError("unbalanced parentheses")
        out.append(op)
    return out


def eval_rpn(items):
    """Evaluates an RPN list of integers and operators."""
    stack = []
    for item in items:
        if isinstance(item, int):
            stack.append(item)
            continue
        if len(stack) < 2:
            raise ValueError("not enough operands")
        b = stack.pop()
        a = stack.pop()
        if item == "+":
            stack.append(a + b)
        elif item == "-":
            stack.append(a - b)
        elif item == "*":
            stack.append(a * b)
        else:
            if b == 0:
                raise ZeroDivisionError("division by zero")
            stack.append(a // b)
    if len(stack) != 1:
        raise ValueError("malformed expression")
    return stack[0]


def evaluate(text):
    """Value of an infix expression."""
    return eval_rpn(to_rpn(tokenize(text)))
