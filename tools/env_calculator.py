#!/usr/bin/env python3
"""env_calculator: a calculator tool for real models, as an rlfuse
environment (docs/environments.md, "The calculator and the code tool").

Usage: tools/py tools/env_calculator.py --checkpoint CKPT.h5 [--tokenizer-json F] [--chat [--chat-role ROLE]]

The model calls it with <tool_call>EXPR</tool_call> anywhere in its
segment; the last complete call counts. EXPR is arithmetic on integers and
decimals: + - * / and parentheses, unary minus and plus (× ÷ and the
Unicode minus read as * / -, a trailing "=" ignored), or the JSON form
of Hermes-style tool calls, {"name": "calculator", "arguments":
{"expression": "EXPR"}}. The answer is the value's text, reward 0, not done:
computed exactly (fractions), an integer as its digits ("408"), a value
with at most 12 decimals as its exact decimal ("3.5", "0.3" for 0.1+0.2),
another rounded to 12 significant digits ("0.333333333333"; a longer
integer part is kept whole, with one decimal). An expression
it does not take is answered "invalid expression" (names, calls, powers,
exponents, anything but the above), "division by zero", or "expression
too long" (over 200 characters): the model sees its mistake and goes on.
A segment without a call is the model's answer: done, no observation.

Evaluated by walking Python's ast of the expression with an allow-list of
nodes: never eval. 200 characters bound the numbers' sizes (no powers), so
any expression takes microseconds.
"""
import ast
import json
import os
import re
import sys
from decimal import Decimal, localcontext
from fractions import Fraction

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rlfuse_env import Environment, last_tool_call, main  # noqa: E402

MAX_CHARS = 200
DIGITS = 12
_LITERAL = re.compile(r"(\d+\.?\d*|\.\d+)")  # a decimal literal as written: no exponent, underscore, base prefix
_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b}


class CalcError(Exception):
    """The answer's text for an expression that has no value."""


def evaluate(expr):
    """The exact value (a Fraction) of EXPR, or CalcError."""
    expr = expr.strip().replace("×", "*").replace("÷", "/").replace("−", "-")
    if expr.endswith("="):
        expr = expr[:-1].rstrip()
    if len(expr) > MAX_CHARS:
        raise CalcError("expression too long")
    if not expr:
        raise CalcError("invalid expression")
    try:
        tree = ast.parse(expr, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise CalcError("invalid expression")

    def value(n):
        if isinstance(n, ast.BinOp) and type(n.op) in _OPS:
            a, b = value(n.left), value(n.right)
            if isinstance(n.op, ast.Div) and b == 0:
                raise CalcError("division by zero")
            return _OPS[type(n.op)](a, b)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = value(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            text = ast.get_source_segment(expr, n)
            if text is None or not _LITERAL.fullmatch(text):
                raise CalcError("invalid expression")
            return Fraction(text)  # the literal as written: 0.1 is one tenth
        raise CalcError("invalid expression")

    return value(tree.body)


def format_value(v):
    """An integer as its digits; a decimal of at most DIGITS decimals exactly; else DIGITS significant digits."""
    if v.denominator == 1:
        return str(v.numerator)
    d = v.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    with localcontext() as ctx:
        if d == 1:  # a terminating decimal: exact when short enough
            ctx.prec = len(str(abs(v.numerator))) + len(str(v.denominator)) + 2
            q = Decimal(v.numerator) / Decimal(v.denominator)
            if -q.as_tuple().exponent <= DIGITS:
                return format(q.normalize(), "f")
        ctx.prec = max(DIGITS, len(str(abs(v.numerator) // v.denominator)) + 1)  # never rounding into the integer part
        q = (Decimal(v.numerator) / Decimal(v.denominator)).normalize()
        return format(q, "f")


def call_expression(call):
    """The expression of a tool call's text: as it is, or the JSON form's arguments.expression."""
    s = call.strip()
    if s.startswith("{"):
        try:
            obj = json.loads(s)
        except ValueError:
            raise CalcError("invalid expression")
        args = obj.get("arguments") if isinstance(obj, dict) else None
        if isinstance(args, str):  # some models write the arguments as a JSON string
            try:
                args = json.loads(args)
            except ValueError:
                raise CalcError("invalid expression")
        e = args.get("expression") if isinstance(args, dict) else None
        if not isinstance(e, str):
            raise CalcError("invalid expression")
        return e
    return s


def answer(call):
    """The observation's text for the tool call's text CALL."""
    try:
        return format_value(evaluate(call_expression(call)))
    except CalcError as e:
        return str(e)


class Calculator(Environment):
    """A calculator tool: <tool_call>EXPR</tool_call> answered with the value's text."""

    def step(self, state, text, ids, turn):
        call = last_tool_call(text)
        if call is None:
            return None, 0.0, True, None  # no call: the model answered
        return answer(call), 0.0, False, None


if __name__ == "__main__":
    main(Calculator)
