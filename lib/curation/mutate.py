"""Lists the AST-level bug mutations of a Python source file (SWE-smith's procedural method).

Usage: python3 mutate.py FILE  ->  a JSON list of candidates on stdout, each
{"kind", "line", "start", "end", "replacement", "function", "what"}: replace the characters
[start, end) of the file's text with `replacement` to plant the bug. Every candidate compiles.

Kinds:
  op_swap           a binary, comparison, boolean or augmented-assignment operator swapped
  off_by_one        an integer literal moved by one
  invert_condition  an if / while / conditional-expression test negated
  remove_statement  a statement of a function body deleted (the body keeps one)
  wrong_return      a returned value replaced (a boolean flipped, anything else None)
"""

import ast
import json
import sys

BINOPS = {
    ast.Add: (ast.Sub, "+", "-"),
    ast.Sub: (ast.Add, "-", "+"),
    ast.Mult: (ast.FloorDiv, "*", "//"),
    ast.FloorDiv: (ast.Mult, "//", "*"),
    ast.Div: (ast.Mult, "/", "*"),
    ast.Mod: (ast.FloorDiv, "%", "//"),
}
CMPOPS = {
    ast.Lt: "<=",
    ast.LtE: "<",
    ast.Gt: ">=",
    ast.GtE: ">",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.In: "not in",
    ast.NotIn: "in",
}
CMPSYM = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
}


class Source:
    def __init__(self, text):
        self.text = text
        self.starts = [0]
        for i, ch in enumerate(text):
            if ch == "\n":
                self.starts.append(i + 1)

    def offset(self, line, col):
        return self.starts[line - 1] + col

    def span(self, node):
        return (
            self.offset(node.lineno, node.col_offset),
            self.offset(node.end_lineno, node.end_col_offset),
        )


def functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def is_docstring(stmt, body):
    return (
        stmt is body[0]
        and isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def gap_replace(src, left, right, symbol, replacement):
    """Replaces `symbol` in the text between two nodes (where an operator sits)."""
    a = src.offset(left.end_lineno, left.end_col_offset)
    b = src.offset(right.lineno, right.col_offset)
    gap = src.text[a:b]
    if symbol.isalpha() or " " in symbol:
        i = (" " + gap + " ").find(" " + symbol + " ")
    else:
        i = gap.find(symbol)
        # "<" must not match the "<" of "<=" etc.
        while i >= 0 and gap[i + len(symbol): i + len(symbol) + 1] in ("=", "/", "*", "<", ">"):
            i = gap.find(symbol, i + 1)
    if i < 0:
        return None
    return (a + i, a + i + len(symbol), replacement)


def candidates(text):
    src = Source(text)
    tree = ast.parse(text)
    out = []

    def add(kind, node, fn, start, end, replacement, what):
        out.append({
            "kind": kind,
            "line": node.lineno,
            "start": start,
            "end": end,
            "replacement": replacement,
            "function": fn.name,
            "what": what,
        })

    for fn in functions(tree):
        body_nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
        for node in body_nodes:
            if isinstance(node, ast.BinOp) and type(node.op) in BINOPS:
                _, sym, rep = BINOPS[type(node.op)]
                hit = gap_replace(src, node.left, node.right, sym, rep)
                if hit:
                    add("op_swap", node, fn, *hit, f"{sym} -> {rep}")
            elif isinstance(node, ast.AugAssign) and type(node.op) in (ast.Add, ast.Sub):
                sym, rep = ("+=", "-=") if isinstance(node.op, ast.Add) else ("-=", "+=")
                hit = gap_replace(src, node.target, node.value, sym, rep)
                if hit:
                    add("op_swap", node, fn, *hit, f"{sym} -> {rep}")
            elif isinstance(node, ast.Compare):
                left = node.left
                for op, right in zip(node.ops, node.comparators):
                    if type(op) in CMPOPS:
                        hit = gap_replace(src, left, right, CMPSYM[type(op)], CMPOPS[type(op)])
                        if hit:
                            swap = f"{CMPSYM[type(op)]} -> {CMPOPS[type(op)]}"
                            add("op_swap", node, fn, *hit, swap)
                    left = right
            elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
                sym, rep = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
                hit = gap_replace(src, node.values[0], node.values[1], sym, rep)
                if hit:
                    add("op_swap", node, fn, *hit, f"{sym} -> {rep}")
            elif (
                isinstance(node, ast.Constant)
                and type(node.value) is int
                and node.end_lineno == node.lineno
            ):
                start, end = src.span(node)
                if text[start:end] != str(node.value):
                    continue
                for delta in (1, -1):
                    value = node.value + delta
                    if value < 0:
                        continue
                    add("off_by_one", node, fn, start, end, str(value), f"{node.value} -> {value}")
            if isinstance(node, (ast.If, ast.While, ast.IfExp)):
                test = node.test
                start, end = src.span(test)
                seg = text[start:end]
                if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                    inner_start, inner_end = src.span(test.operand)
                    rep = text[inner_start:inner_end]
                else:
                    simple = isinstance(test, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
                    rep = f"not {seg}" if simple else f"not ({seg})"
                add("invert_condition", test, fn, start, end, rep, "condition negated")
            if isinstance(node, ast.Return) and node.value is not None:
                start, end = src.span(node.value)
                value = node.value
                if isinstance(value, ast.Constant) and type(value.value) is bool:
                    rep = str(not value.value)
                elif isinstance(value, ast.Constant) and value.value is None:
                    continue
                else:
                    rep = "None"
                add("wrong_return", node, fn, start, end, rep, f"returns {rep}")
        # Statements of any block inside the function, deleted whole-line.
        for node in [fn] + body_nodes:
            for field in ("body", "orelse"):
                block = getattr(node, field, None)
                if not isinstance(block, list) or len(block) < 2:
                    continue
                for stmt in block:
                    if not isinstance(stmt, ast.stmt) or is_docstring(stmt, block):
                        continue
                    if isinstance(stmt, (ast.Return, ast.FunctionDef, ast.ClassDef)):
                        continue
                    first = src.starts[stmt.lineno - 1]
                    head = text[first:src.offset(stmt.lineno, stmt.col_offset)]
                    end = src.offset(stmt.end_lineno, stmt.end_col_offset)
                    tail_end = text.find("\n", end)
                    tail_end = len(text) if tail_end < 0 else tail_end
                    if head.strip() or text[end:tail_end].strip():
                        continue
                    add("remove_statement", stmt, fn, first, tail_end + 1, "", "statement removed")
    valid = []
    seen = set()
    for c in out:
        mutated = text[: c["start"]] + c["replacement"] + text[c["end"]:]
        if mutated == text or mutated in seen:
            continue
        try:
            compile(mutated, "<mutant>", "exec")
        except SyntaxError:
            continue
        seen.add(mutated)
        valid.append(c)
    valid.sort(key=lambda c: (c["start"], c["kind"], c["replacement"]))
    return valid


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(json.dumps(candidates(f.read())))
