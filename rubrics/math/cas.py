r"""CAS comparison of two expressions (runs inside the worker processes of `rubrics.math.pool`).

* `to_python` is a small recursive-descent LaTeX/Python-syntax reader. It consumes the whole input
  or raises `ConvertError` (no prefix parses, no "pull a number out of a failed parse"). Its output
  uses only numbers, operators, parentheses, whitelisted function names and symbol names, and is
  evaluated by `sympy.parse_expr` with empty builtins.
* Guards before any evaluation: length, nesting depth, and a bound on the size of integers the
  expression can produce (towers, factorials, exp) — past them, `TooComplex`.
* Equality, never accepting on numerics alone: constants compare exactly (rational difference), a
  60-digit evaluation can only reject, and acceptance needs `simplify(difference) == 0`. Expressions
  with symbols are evaluated exactly at 4 rational points (rational functions decide there); other
  expressions are screened numerically and accepted only when `simplify` proves the identity (with
  positive symbols). So `sqrt(10^400+1)` ≠ `10^200` and `sin²x+cos²x+10^-60` ≠ `1`. Equations compare
  as proportional `lhs - rhs` (exact ratios at the points), inequalities as positive multiples.
"""

from __future__ import annotations

import math
import re

from rubrics.math.numeric import Num, close, parse_number
from rubrics.math.structure import TooComplex

MAX_LEN = 2000
MAX_DEPTH = 64
MAX_BITS = 60_000


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
_PY_NAMES = ("sqrt", "exp", "sin", "cos", "tan", "log", "ln", "pi")
_TOKEN = re.compile(
    r"\s*(\\[A-Za-z]+|\\[{}|]|(?:\d+\.?\d*|\.\d+)[eE][-+]?\d{1,3}(?![\d.])|\d+\.?\d*|\.\d+|\*\*|[A-Za-z]"
    r"|[-+*/^_()\[\]{}|!,])"
)


def _tokens(s: str) -> list[str]:
    out, pos = [], 0
    s = s.strip()
    while pos < len(s):
        m = _TOKEN.match(s, pos)
        if not m:
            raise ConvertError(f"unexpected {s[pos : pos + 10]!r}")
        out.append(m.group(1))
        pos = m.end()
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
                    return f"({self.group()})**(1/({index}))"
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


# ----------------------------------------------------------------------------- sympy side

_SYMPY = None


def _sympy():
    global _SYMPY
    if _SYMPY is None:
        import sympy
        from sympy.parsing.sympy_parser import auto_number, parse_expr

        _SYMPY = (sympy, parse_expr, (auto_number,))
    return _SYMPY


def _namespace(symbols: set[str]) -> dict:
    sp = _sympy()[0]
    ns = {
        name: getattr(sp, name)
        for name in (
            "sin",
            "cos",
            "tan",
            "sec",
            "csc",
            "cot",
            "asin",
            "acos",
            "atan",
            "sinh",
            "cosh",
            "tanh",
            "log",
            "exp",
            "sqrt",
            "Abs",
            "factorial",
            "binomial",
            "floor",
            "ceiling",
            "pi",
            "E",
            "I",
            "oo",
            "Integer",
            "Rational",
            "Float",
            "Add",
            "Mul",
            "Pow",
            "Symbol",
        )
    }
    for name in symbols:
        ns[name] = sp.Symbol(name)
    return ns


def _bits(e) -> float:
    """log2 of a bound on the integers `e` can produce when evaluated (TooComplex past MAX_BITS)."""
    sp = _sympy()[0]
    if e.is_Integer or e.is_Rational:
        return float(max(abs(e.p).bit_length(), abs(e.q).bit_length(), 1))
    if e.is_Atom:
        return 8.0
    if isinstance(e, sp.Pow):
        if e.base in (sp.Integer(1), sp.Integer(-1), sp.Integer(0)):
            return 1.0
        b, x = _bits(e.base), _bits(e.exp)
        if x > 64:
            raise TooComplex("power tower")
        if e.exp.free_symbols:
            out = b * 64.0
        else:
            value = _finite(e.exp.evalf(15))  # safe: the exponent's own integers are small
            out = b * max(abs(value) if value is not None else 2.0**x, 1.0)
    elif isinstance(e, sp.factorial):
        n = _bits(e.args[0])
        if n > 14:
            raise TooComplex("factorial too large")
        out = 2.0**n * n
    elif isinstance(e, sp.exp):
        x = _bits(e.args[0])
        if x > 20:
            raise TooComplex("exp too large")
        out = 2.0**x * 1.5
    elif isinstance(e, sp.Mul):
        out = sum(_bits(a) for a in e.args)
    elif isinstance(e, sp.Add):
        out = max(_bits(a) for a in e.args) + math.log2(len(e.args))
    else:
        out = max((_bits(a) for a in e.args), default=8.0) + 8
    if out > MAX_BITS:
        raise TooComplex("integers too large")
    return out


def to_sympy(text: str):
    """The evaluated sympy expression of `text`, after the complexity guards."""
    sp, parse_expr, transforms = _sympy()
    code, symbols = to_python(text)
    ns = _namespace(symbols)
    lazy = parse_expr(
        code,
        local_dict=dict(ns),
        global_dict={"__builtins__": {}},
        transformations=transforms,
        evaluate=False,
    )
    _bits(lazy)
    return parse_expr(code, local_dict=dict(ns), global_dict={"__builtins__": {}}, transformations=transforms)


def _plain_num(text: str) -> Num | None:
    num = parse_number(text)
    return num if num is not None and num.inexact else None


def _finite(z) -> complex | None:
    try:
        c = complex(z)
    except (TypeError, ValueError):
        return None
    if math.isnan(c.real) or math.isnan(c.imag) or math.isinf(c.real) or math.isinf(c.imag):
        return None
    return c


_POINTS = (
    (0.5377, 1.8339, 2.2588, 0.8622, 1.3188),
    (1.3077, 0.4336, 2.3426, 3.5784, 2.7694),
    (0.6715, 1.2075, 0.7172, 1.6302, 0.4889),
    (2.0347, 0.7269, 1.3034, 0.2939, 1.7873),
)


def _points(symbols: list) -> list[dict]:
    """Four deterministic rational points (positive, away from small integers) for the symbols."""
    sp = _sympy()[0]
    return [
        {s: sp.Rational(str(row[k % len(row)] + 0.1 * (k // len(row)))) for k, s in enumerate(symbols)}
        for row in _POINTS
    ]


def _value_at(expr, subs: dict):
    """`expr` at a rational point: exact (a sympy Rational) when it is a rational function there,
    else a finite complex at 50 digits, else None (undefined at that point)."""
    sp = _sympy()[0]
    try:
        v = expr.xreplace(subs)
        if v.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
            return None
        if v.is_Rational:
            return v
        return _finite(v.evalf(50))
    except (TypeError, ValueError, ZeroDivisionError, OverflowError, ArithmeticError):
        return None


def _at_points(expr_a, expr_b, symbols: list) -> list[tuple]:
    out = []
    for subs in _points(symbols):
        a, b = _value_at(expr_a, subs), _value_at(expr_b, subs)
        if a is not None and b is not None:
            out.append((a, b))
    return out


def _same(a, b, rel: float) -> bool:
    """Exact equality for two Rationals, else relative closeness of complex values."""
    sp = _sympy()[0]
    if isinstance(a, sp.Basic) and isinstance(b, sp.Basic):
        return a == b
    a, b = complex(a), complex(b)
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def _has_bad(e) -> bool:
    sp = _sympy()[0]
    return e.has(sp.nan, sp.zoo) or e is sp.nan


def values_equal(pred: str, gold: str) -> bool:
    """Value equality of two expressions (see module docstring); raises ConvertError / TooComplex."""
    sp = _sympy()[0]
    p, g = to_sympy(pred), to_sympy(gold)
    if _has_bad(p) or _has_bad(g):
        return False
    if p == g:
        return True
    p_num, g_num = _plain_num(pred), _plain_num(gold)
    free = sorted(p.free_symbols | g.free_symbols, key=str)
    if not free:
        if p.has(sp.oo, -sp.oo) or g.has(sp.oo, -sp.oo):
            return p == g
        pv, gv = p.evalf(60), g.evalf(60)
        if p_num or g_num:
            exact = g if p_num is not None else p
            value = _finite(exact.evalf(60))
            if value is None or abs(value.imag) > 0 or not exact.is_real:
                return False
            as_num = Num(_frac(sp.Rational(str(sp.N(exact, 60)))), -1, 0)
            return close(p_num, as_num) if p_num is not None else close(as_num, g_num)
        diff = p - g
        if diff == 0:
            return True
        if diff.is_Rational:
            return False
        scale = max(abs(_finite(pv) or 0), abs(_finite(gv) or 0), 1e-300)
        d = _finite(diff.evalf(60))
        if d is None or abs(d) > 1e-45 * scale:
            return False
        # numerically zero to 45 digits: only an exact simplification proves it (no numeric acceptance,
        # so near-identities such as sqrt(10^400 + 1) vs 10^200 are never accepted)
        return sp.simplify(diff) == 0
    floats = bool(p_num or g_num or p.has(sp.Float) or g.has(sp.Float))
    diff = p - g
    if not diff.free_symbols:  # the symbols cancelled: an exact constant decides
        return diff == 0 or (not diff.is_Rational and _constant_zero(diff, p, g, free))
    pairs = _at_points(p, g, free)
    if len(pairs) >= 2 and not all(_same(a, b, 1e-6 if floats else 1e-35) for a, b in pairs):
        return False
    if len(pairs) >= 2 and (floats or all(isinstance(a, sp.Basic) for a, _ in pairs)):
        return True  # exact agreement of rational functions at 4 rational points, or within float tolerance
    # transcendental or radical: numerically equal, so only an exact simplification may accept
    positive = {s: sp.Symbol(s.name, positive=True) for s in free}
    return sp.simplify(diff.xreplace(positive)) == 0


def _constant_zero(diff, p, g, free) -> bool:
    sp = _sympy()[0]
    d = _finite(diff.evalf(60))
    return d is not None and abs(d) < 1e-45 and sp.simplify(diff) == 0


def _frac(r):
    from fractions import Fraction

    return Fraction(int(r.p), int(r.q))


def relations_equal(pred_diff: str, gold_diff: str, positive: bool) -> bool:
    """`pred_diff = c · gold_diff` for one constant c ≠ 0 (c > 0 when `positive`)."""
    p, g = to_sympy(pred_diff), to_sympy(gold_diff)
    if _has_bad(p) or _has_bad(g):
        return False
    free = sorted(p.free_symbols | g.free_symbols, key=str)
    if not free:
        return False
    ratios = []
    for subs in _points(free):
        r = _value_at(p / g, subs) if _value_at(g, subs) not in (None, 0) else None
        if r is not None:
            ratios.append(r)
    if len(ratios) < 2:
        return False
    c = ratios[0]
    if c == 0 or not all(_same(r, c, 1e-30) for r in ratios):
        return False
    cc = complex(c)
    if positive and not (abs(cc.imag) < 1e-30 and cc.real > 0):
        return False
    return True
