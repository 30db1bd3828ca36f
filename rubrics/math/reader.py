r"""A small recursive-descent reader: one answer in LaTeX (or Python syntax) → Python source for sympy.

It consumes the whole input or raises `ConvertError` (no prefix parses, no "pull a number out of a
failed parse"). Its output uses only numbers, operators, parentheses, whitelisted function names and
symbol names, so `sympy.parse_expr` can evaluate it with empty builtins. Letters are single-letter
symbols (`xy` = x·y) unless they spell a known function; `e` is Euler's number and `i` the imaginary
unit; `2\frac{1}{2}` is a mixed number; decimals and `1.5e-3` become exact rationals. Nesting deeper
than `MAX_DEPTH`, inputs longer than `MAX_LEN` and literals over 400 digits raise `TooComplex`.
"""

from __future__ import annotations

import re

from rubrics.math.structure import TooComplex

MAX_LEN = 2000
MAX_DEPTH = 64


class ConvertError(ValueError):
    """The text is not an expression this reader understands (compared as a string instead)."""


_FUNCS = {
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "sec": "sec",
    "csc": "csc",
    "cot": "cot",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "sinh": "sinh",
    "cosh": "cosh",
    "tanh": "tanh",
    "ln": "log",
    "log": "log",
    "exp": "exp",
    "sqrt": "sqrt",
    "cis": "cis",
}
_GREEK = {
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "varepsilon",
    "theta",
    "vartheta",
    "lambda",
    "mu",
    "nu",
    "xi",
    "rho",
    "sigma",
    "tau",
    "phi",
    "varphi",
    "chi",
    "psi",
    "omega",
    "Gamma",
    "Delta",
    "Theta",
    "Lambda",
    "Sigma",
    "Phi",
    "Psi",
    "Omega",
    "eta",
    "kappa",
    "zeta",
    "iota",
}
_PY_NAMES = ("sqrt", "exp", "sin", "cos", "tan", "log", "ln", "pi", "cis")
_TOKEN = re.compile(
    r"\s*(\\[A-Za-z]+|\\[{}|]|(?:\d+\.?\d*|\.\d+)[eE][-+]?\d{1,3}(?![\d.])|\d+\.?\d*|\.\d+|\*\*|[A-Za-z]"
    r"|[-+*/^_()\[\]{}|!,])"
)


def _is_number(tok: str) -> bool:
    return tok[0].isdigit() or (tok[0] == "." and len(tok) > 1)


def _tokens(s: str) -> list[str]:
    """The tokens of `s`; two numbers apart by a space only (`4 5`: 45? 4, 5? 20?) are no expression."""
    out, pos, spaced = [], 0, False
    s = s.strip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise ConvertError(f"unexpected {s[pos : pos + 10]!r}")
        tok = m.group(1)
        script = len(out) > 1 and out[-2] in ("_", "^")  # `\log_2 8`, `x^2 3`: a script, then its operand
        if spaced and out and _is_number(out[-1]) and _is_number(tok) and not script:
            raise ConvertError(f"numbers {out[-1]!r} and {tok!r} apart by a space")
        out.append(tok)
        pos = m.end()
        spaced = pos < len(s) and s[pos].isspace()
        while pos < len(s) and s[pos].isspace():
            pos += 1
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.depth = 0
        self.abs_open = 0
        self.symbols: set[str] = set()

    def peek(self, k: int = 0) -> str | None:
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise ConvertError(f"expected {expected!r}, got {tok!r}")
        self.i += 1
        return tok

    def read(self) -> str:
        out = self.expr()
        if self.peek() is not None:
            raise ConvertError(f"trailing input at {self.peek()!r}")
        return out

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TooComplex("nesting too deep")

    def expr(self) -> str:
        self._enter()
        out = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            out += op + self.term()
        self.depth -= 1
        return out

    def _starts_atom(self, tok: str | None) -> bool:
        if tok is None:
            return False
        if tok == "|":
            return self.abs_open == 0
        if tok.startswith("\\"):
            name = tok[1:]
            return (
                name in _FUNCS
                or name in _GREEK
                or name in ("frac", "sqrt", "pi", "infty", "binom", "lfloor", "lceil", "{", "|")
            )
        return tok[0].isalnum() or tok in ("(", "[", "{") or tok[0] == "."

    def term(self) -> str:
        out = self.factor()
        while True:
            tok = self.peek()
            if tok in ("*", "\\cdot", "\\times"):
                self.take()
                out += "*" + self.factor()
            elif tok in ("/", "\\div"):
                self.take()
                out += "/" + self.factor()
            elif self._starts_atom(tok):
                if tok[0].isdigit() and out and out[-1].isdigit():
                    raise ConvertError("two numbers side by side")
                out += "*" + self.factor()
            else:
                return out

    def factor(self) -> str:
        tok = self.peek()
        if tok in ("-", "+"):
            self.take()
            return "(" + ("-" if tok == "-" else "") + self.factor() + ")"
        base = self.postfix()
        if self.peek() in ("^", "**"):
            self.take()
            exponent = self.factor() if self.peek() in ("-", "+") else self.group()
            return f"({base})**({exponent})"
        return base

    def postfix(self) -> str:
        out = self.atom()
        mixed = self.toks[self.i : self.i + 7]
        if (
            re.fullmatch(r"\(\d+\)", out)
            and len(mixed) == 7
            and mixed[0] == "\\frac"
            and mixed[1] == mixed[4] == "{"
            and mixed[3] == mixed[6] == "}"
            and mixed[2].isdigit()
            and mixed[5].isdigit()
        ):
            self.i += 7  # a mixed number: 2\frac{1}{2} is 2 + 1/2 (never 2 · 1/2)
            return f"({out}+({mixed[2]})/({mixed[5]}))"
        while self.peek() == "!":
            self.take()
            literal = re.fullmatch(r"\((\d+)\)", out)
            if literal and int(literal.group(1)) > 5000:
                raise TooComplex("factorial too large")
            out = f"factorial({out})"
        return out

    def group(self) -> str:
        """A `{…}` group, or the single next atom (as in `x^2`, `\\frac12`)."""
        if self.peek() == "{":
            self.take()
            inner = self.expr()
            self.take("}")
            return f"({inner})"
        tok = self.peek()
        if tok is not None and tok[0].isdigit() and len(tok) > 1 and "." not in tok:
            self.toks[self.i] = tok[1:]
            return self._number(tok[0])
        return self.postfix()

    def _number(self, tok: str) -> str:
        if "e" in tok.lower():  # scientific notation 1.5e-3 (Python style), exact
            mantissa, _, exponent = tok.lower().partition("e")
            scale = int(exponent)
            power = f"(10**{scale})" if scale >= 0 else f"(1/10**{-scale})"
            return f"({self._number(mantissa)}*{power})"
        if "." in tok:
            whole, _, frac = tok.partition(".")
            if len(tok) > 400:
                raise TooComplex("number too long")
            return f"({int(whole or 0) * 10 ** len(frac) + int(frac or 0)}/{10 ** len(frac)})"
        if len(tok) > 400:
            raise TooComplex("number too long")
        return f"({int(tok)})"

    def _symbol(self, name: str) -> str:
        if self.peek() == "_":
            self.take()
            sub = self.take()
            if sub == "{":
                parts = []
                while self.peek() not in ("}", None):
                    parts.append(self.take())
                self.take("}")
                sub = "".join(parts)
            sub = re.sub(r"[^A-Za-z0-9]", "", sub)
            name = f"{name}_{sub}" if sub else name
        if name == "e":
            return "E"
        if name == "i":
            return "I"
        self.symbols.add(name)
        return name

    def atom(self) -> str:
        self._enter()
        try:
            return self._atom()
        finally:
            self.depth -= 1

    def _atom(self) -> str:
        tok = self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return self._number(tok)
        if tok in ("(", "[", "{"):
            inner = self.expr()
            self.take({"(": ")", "[": "]", "{": "}"}[tok])
            return f"({inner})"
        if tok == "|":
            self.abs_open += 1
            inner = self.expr()
            self.abs_open -= 1
            self.take("|")
            return f"Abs({inner})"
        if tok.isalpha():
            word = tok
            for name in _PY_NAMES:
                ahead = "".join(self.toks[self.i - 1 : self.i - 1 + len(name)])
                if ahead == name and all(len(t) == 1 for t in self.toks[self.i - 1 : self.i - 1 + len(name)]):
                    self.i += len(name) - 1
                    word = name
                    break
            if word == "pi":
                return "pi"
            if word in _FUNCS:
                return self._function(_FUNCS[word])
            return self._symbol(word)
        if tok.startswith("\\"):
            name = tok[1:]
            if name == "frac":
                top = self.group()
                return f"({top})/({self.group()})"
            if name == "binom":
                top = self.group()
                return f"binomial({top},{self.group()})"
            if name == "sqrt":
                if self.peek() == "[":
                    self.take()
                    index = self.expr()
                    self.take("]")
                    radicand = self.group()
                    odd = re.fullmatch(r"\((\d+)\)", index)
                    if odd and int(odd.group(1)) % 2 == 1:  # the real odd root: \sqrt[3]{-27} = -3
                        return f"(sign({radicand})*Abs({radicand})**(1/{odd.group(1)}))"
                    return f"({radicand})**(1/({index}))"
                return f"sqrt({self.group()})"
            if name == "pi":
                return "pi"
            if name == "infty":
                return "oo"
            if name in ("lfloor", "lceil"):
                inner = self.expr()
                self.take("\\rfloor" if name == "lfloor" else "\\rceil")
                return f"{'floor' if name == 'lfloor' else 'ceiling'}({inner})"
            if name in _FUNCS:
                return self._function(_FUNCS[name])
            if name in _GREEK:
                return self._symbol(name)
        raise ConvertError(f"unsupported token {tok!r}")

    def _function(self, fn: str) -> str:
        power = base = None
        if self.peek() == "_" and fn == "log":
            self.take()
            base = self.group()
        if self.peek() in ("^", "**"):
            self.take()
            power = self.group()
        if self.peek() in ("(", "{", "["):
            arg = self.atom()
        else:
            parts = [self.postfix()]
            while self.peek() is not None and (self.peek()[0].isalnum() or self.peek() in ("\\pi",)):
                parts.append(self.postfix())
            arg = "*".join(parts)
        call = f"log({arg},{base})" if base else f"{fn}({arg})"
        return f"({call})**({power})" if power else call


def to_python(text: str) -> tuple[str, set[str]]:
    """Python source for sympy and the symbol names it uses; raises ConvertError / TooComplex."""
    if len(text) > MAX_LEN:
        raise TooComplex("answer too long")
    reader = _Reader(text)
    return reader.read(), reader.symbols
