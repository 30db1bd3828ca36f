r"""CAS comparison of two expressions (runs inside the worker processes of `rubrics.math.pool`).

* `rubrics.math.reader.to_python` turns the answer into Python source (whole input or ConvertError);
  it is evaluated by `sympy.parse_expr` with empty builtins.
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

from rubrics.math.numeric import Num, close, parse_number
from rubrics.math.reader import ConvertError, to_python
from rubrics.math.structure import TooComplex

__all__ = ["ConvertError", "relations_equal", "to_sympy", "values_equal"]
MAX_BITS = 60_000

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
    ns["sign"] = sp.sign
    ns["cis"] = lambda x: sp.exp(sp.I * x)
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
        x = _bits(e.args[0].xreplace({sp.I: sp.Integer(0)}))  # |e^{a+bi}| = e^a
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
    expr = parse_expr(code, local_dict=dict(ns), global_dict={"__builtins__": {}}, transformations=transforms)
    return _real_roots(expr)


def _odd_root_power(e) -> bool:
    return (
        e.is_Pow
        and e.exp.is_Rational
        and e.exp.q % 2 == 1
        and e.exp.q > 1
        and not e.base.is_nonnegative
        and not isinstance(e.base, _sympy()[0].Abs)
        and e.base.is_real is not False
    )


def _real_roots(expr):
    """Powers with an odd denominator read over the reals: `x^{2/3}` = (∛x)², `(t^3)^{1/3}` = t,
    `(-8)^{1/3}` = -2 (never the principal complex branch)."""
    sp = _sympy()[0]
    if not expr.has(sp.Pow):
        return expr
    return expr.replace(
        _odd_root_power,
        lambda e: (sp.sign(e.base) if e.exp.p % 2 else 1) * sp.Abs(e.base) ** e.exp,
    )


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
    # mixed signs: an identity that holds only for positive values (sqrt(y^2) = y) fails here
    (-0.8637, 0.0774, -1.2141, -1.1135, 0.3252),
    (1.5326, -0.7697, 0.3714, -0.2256, -1.0891),
    (-1.7254, -0.3034, 0.2939, 0.8884, -1.1471),
    (-0.6156, 0.7481, -0.1924, -1.4023, 1.4193),
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


def values_equal(pred: str, gold: str, round_exact: bool = False) -> bool:
    """Value equality of two expressions (see module docstring); raises ConvertError / TooComplex.
    `round_exact`: an exact value answers a decimal gold it rounds to (`numeric.close`)."""
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
            return close(p_num, as_num) if p_num is not None else close(as_num, g_num, round_exact)
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
        return _proved_zero(diff, p, g)
    floats = bool(p_num or g_num or p.has(sp.Float) or g.has(sp.Float))
    diff = p - g
    if not diff.free_symbols:  # the symbols cancelled: an exact constant decides
        return diff == 0 or (not diff.is_Rational and _constant_zero(diff, p, g, free))
    pairs = _at_points(p, g, free)
    if len(pairs) >= 2 and not all(_same(a, b, 1e-6 if floats else 1e-35) for a, b in pairs):
        return False
    if len(pairs) >= 2 and (floats or all(isinstance(a, sp.Basic) for a, _ in pairs)):
        return True  # exact agreement of rational functions at 4 rational points, or within float tolerance
    # transcendental or radical: numerically equal at points of both signs, so only an exact
    # simplification over the reals may accept (never over positive symbols: sqrt(y^2) is |y|)
    real = {s: sp.Symbol(s.name, real=True) for s in free}
    return _proved_zero(diff.xreplace(real))


_TRIG_FUNCS = ("sin", "cos", "tan", "sec", "csc", "cot")


def _proved_zero(diff, p=None, g=None) -> bool:
    """An exact proof that `diff` (= p − g) is 0, cheapest first: expansion; for constants,
    equal squares of two same-sign reals (denesting: √(5+2√6) = √2+√3); for trig, a rational
    function of e^{iθ} that cancels; exponentials of i·θ as cos + i·sin; finally `simplify`."""
    sp = _sympy()[0]
    if sp.expand(diff) == 0:
        return True
    if p is not None and not diff.free_symbols and _same_sign_real(p, g):
        squares = sp.expand(p**2 - g**2)
        if squares == 0:
            return True
        if squares.is_Rational:
            return False  # same-sign reals with different squares: √(10⁴⁰⁰+1) ≠ 10²⁰⁰
    if any(diff.has(getattr(sp, f)) for f in _TRIG_FUNCS):
        rational = sp.cancel(sp.expand(diff.rewrite(sp.exp)))
        if rational == 0:
            return True
        if rational.is_Rational:
            return False  # a nonzero constant: sin²x + cos²x + 10⁻⁶⁰ − 1
    if diff.has(sp.I) and diff.has(sp.exp) and sp.simplify(sp.expand_complex(diff)) == 0:
        return True
    if diff.has(sp.sign):  # real roots: sign(u)^2 and sign(u^2) are 1 wherever u ≠ 0
        diff = diff.replace(
            lambda e: (
                (e.is_Pow and isinstance(e.base, sp.sign) and e.exp.is_even)
                or (isinstance(e, sp.sign) and e.args[0].is_nonnegative)
            ),
            lambda e: sp.Integer(1),
        )
    return sp.simplify(diff) == 0


def _same_sign_real(p, g) -> bool:
    a, b = _finite(p.evalf(30)), _finite(g.evalf(30))
    return a is not None and b is not None and a.imag == 0 == b.imag and a.real * b.real > 0


def _constant_zero(diff, p, g, free) -> bool:
    d = _finite(diff.evalf(60))
    return d is not None and abs(d) < 1e-45 and _proved_zero(diff, p, g)


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
