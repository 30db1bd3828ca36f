r"""Correct answers in real-output shapes that a verifier must pay: (pred, gold, expected) by class.

Each class was written fresh (new numbers and wording) for issue 15; the hostile twins of these
cases live in `adversarial_cases.py`. `expected` is True unless a case pins a near miss.
"""

COMMITTED = [
    (r"Thus the area is 25, not 36.", "25", True),
    (r"The area is $\boxed{25}$, not $\boxed{36}$.", "25", True),
    (r"At first I got \boxed{36}, but that is wrong. The correct count is \boxed{25}.", "25", True),
    ("所以面积是 25，不是 36。", "25", True),
    ("El área es 25, no 36.", "25", True),
    (r"It is not 36; the area is $\boxed{25}$.", "25", True),
    (r"The answer is not negative, so it is \boxed{25}.", "25", True),
]
REASONING_TAGS = [
    (r"<thinking>maybe \boxed{64}</thinking> Final: \boxed{81}", "81", True),
    (r"<reasoning>the value is \boxed{64}</reasoning><answer>81</answer>", "81", True),
    (r"<reasoning>\boxed{81}</reasoning>\n<answer>\boxed{81}</answer>", "81", True),
    (
        r"<|begin_of_thought|> \boxed{64} <|end_of_thought|> <|begin_of_solution|> \boxed{81} <|end_of_solution|>",
        "81",
        True,
    ),
    (r"<answer>The final answer is 81.</answer>", "81", True),
    (r"<answer>81</answer> so \boxed{81}", "81", True),
]
QUOTED = [
    (
        'The task says: "Write the result as \\boxed{64} if the grid is full." It is not full, so \\boxed{81}.',
        "81",
        True,
    ),
    ("> Compute the sum, put it in \\boxed{}\n\nThe sum works out to \\boxed{81}.", "81", True),
    ("```python\nprint(9 * 9)\n```\nThe program prints 81, so the answer is $\\boxed{81}$.", "81", True),
    (r"Put the final answer within \boxed{}. The result: \boxed{81}", "81", True),
]

UNITS = [
    (r"\boxed{3\text{ km}}", r"3000\text{ m}", True),
    (r"\boxed{1.5\text{ km}}", r"1500\text{ m}", True),
    (r"\boxed{90 \text{ minutes}}", r"1.5\text{ hours}", True),
    (r"\boxed{2500\text{ g}}", r"2.5 \text{ kg}", True),
    (r"\boxed{3 \text{ L}}", r"3000\text{ mL}", True),
    (r"\boxed{2\text{ m}^2}", r"20000\text{ cm}^2", True),
    (r"\boxed{36\text{ km/h}}", r"10\text{ m/s}", True),
    (r"\boxed{4\text{ million}}", "4000000", True),
    (r"\boxed{2.5 \text{ billion}}", "2500000000", True),
    (r"\boxed{7\text{ hundred}}", "700", True),
    (r"\boxed{12\text{ cm}}", "12", True),
    ("12", r"12\text{ cm}", True),
    (r"\boxed{\$4.50}", r"4.50\text{ dollars}", True),
    (r"\boxed{0.25\%}", "0.25", True),
    (r"\boxed{25\%}", "25", True),
    (r"\boxed{8\,\mathrm{kg}}", "8 kg", True),
]

REPEATING = [
    (r"\boxed{0.\overline{4}}", r"\frac{4}{9}", True),
    (r"\boxed{0.3\overline{8}}", r"\frac{7}{18}", True),
    (r"\boxed{3.\overline{9}}", "4", True),
    (r"\boxed{0.\overline{27}}", r"\frac{3}{11}", True),
    (r"\boxed{1.\overline{285714}}", r"\frac{9}{7}", True),
    (r"\boxed{0.\bar{5}}", r"\frac59", True),
    (r"\boxed{0.\dot{7}}", r"\frac79", True),
    (r"\boxed{0.\dot{0}\dot{9}}", r"\frac{1}{11}", True),
    (r"\boxed{0.4(6)}", r"\frac{7}{15}", True),
    (r"\boxed{0.8333\ldots}", r"\frac56", True),
    (r"\boxed{0.090909...}", r"\frac{1}{11}", True),
    (r"\boxed{16\frac{2}{3}\%}", r"\frac{50}{3}\%", True),
    (r"\boxed{16\frac23\%}", r"16.\overline{6}\%", True),
    (r"\boxed{4\frac{3}{8}}", "4.375", True),
    ("\\boxed{3\u00bd}", "3.5", True),
    (r"\boxed{-1\frac{1}{4}}", "-1.25", True),
]
LOCALE = [
    (r"\boxed{4{,}25}", "4.25", True),
    (r"\boxed{0{,}5}", r"\frac12", True),
    ("La respuesta es $6{,}75$.", "6.75", True),
    (r"\boxed{3.456.789}", "3456789", True),
    (r"\boxed{12.500.000}", "12500000", True),
    (r"\boxed{2.345,5}", "2345.5", True),
    (r"\boxed{1'250'000}", "1250000", True),
    ("\\boxed{45\u202f600}", "45600", True),
    ("\\boxed{45\u2009600}", "45600", True),
    ("\\boxed{45\u00a0600}", "45600", True),
    ("\\boxed{\u0667\u0668}", "78", True),
    ("\\boxed{\u06f7\u06f8}", "78", True),
    ("\\boxed{\u096d\u096e}", "78", True),
    ("\\boxed{\u09ed\u09ee}", "78", True),
    ("\\boxed{\u0e57\u0e58}", "78", True),
    ("\\boxed{\u0663\u066b\u0665}", "3.5", True),
    ("答案是：７８。", "78", True),
    ("\\boxed{\uff08\uff13\uff0c\uff14\uff09}", "(3,4)", True),
    ("\\boxed{\uff0d\uff15}", "-5", True),
]

INTERVALS = [
    (r"\boxed{[-2,3]\cup[1,6]}", "[-2,6]", True),
    (r"\boxed{[-2,1]\cup(1,6]}", "[-2,6]", True),
    (r"\boxed{(0,2)\cup[2,5)\cup(4,9)}", "(0,9)", True),
    (r"\boxed{(7,\infty)\cup(-\infty,-2]}", r"(-\infty,-2]\cup(7,\infty)", True),
    (r"\boxed{\mathbb{R}}", r"(-\infty, \infty)", True),
    (r"\boxed{(-\infty,+\infty)}", r"\mathbb{R}", True),
    (r"\boxed{\text{all real numbers}}", r"(-\infty,\infty)", True),
    ("\\boxed{\u211d}", r"(-\infty,\infty)", True),
    (r"\boxed{\mathbb{R}\setminus\{-5\}}", r"(-\infty,-5)\cup(-5,\infty)", True),
    (r"\boxed{(-\infty,-5)\cup(-5,\infty)}", r"\mathbb{R}\setminus\{-5\}", True),
    (r"\boxed{\mathbb{R}-\{0, 1\}}", r"(-\infty,0)\cup(0,1)\cup(1,\infty)", True),
    (r"\boxed{x \neq -5}", r"(-\infty,-5)\cup(-5,\infty)", True),
    (r"\boxed{(-\infty,-5)\cup(-5,\infty)}", r"x\neq -5", True),
    (r"\boxed{x<-3 \text{ or } x>2}", r"(-\infty,-3)\cup(2,\infty)", True),
    (r"\boxed{(-\infty,-3)\cup(2,\infty)}", r"x<-3 \text{ or } x>2", True),
    (r"\boxed{x \geq 1 \text{ and } x < 4}", "[1,4)", True),
    (r"\boxed{x\le -1 \text{ or } x \ge 1}", r"(-\infty,-1]\cup[1,\infty)", True),
    (r"$x \in [0, 2]$", r"0 \le x \le 2", True),
    (r"\boxed{-4 < x \leq 6}", "(-4, 6]", True),
]

CAS_PROOFS = [
    (r"\boxed{\sqrt[3]{-125}}", "-5", True),
    (r"\boxed{-5}", r"\sqrt[3]{-125}", True),
    (r"\boxed{\sqrt[5]{-243}}", "-3", True),
    (r"\boxed{\sqrt[3]{-8}+1}", "-1", True),
    (r"\boxed{\sqrt{5+2\sqrt{6}}}", r"\sqrt2+\sqrt3", True),
    (r"\boxed{\sqrt{11-6\sqrt{2}}}", r"3-\sqrt{2}", True),
    (r"\boxed{\sin 75^\circ}", r"\frac{\sqrt{6}+\sqrt{2}}{4}", True),
    (r"\boxed{\frac{\sqrt6-\sqrt2}{4}}", r"\cos 75^{\circ}", True),
    (r"\boxed{\tan 15^\circ}", r"2-\sqrt{3}", True),
    (r"\boxed{\cos 36^\circ}", r"\frac{1+\sqrt5}{4}", True),
    (r"\boxed{\sin\frac{5\pi}{12}}", r"\frac{\sqrt6+\sqrt2}{4}", True),
    (r"\boxed{4e^{i\pi/6}}", r"2\sqrt{3}+2i", True),
    (r"\boxed{2\sqrt{3}+2i}", r"4e^{\frac{\pi i}{6}}", True),
    (r"\boxed{3(\cos\frac{\pi}{2}+i\sin\frac{\pi}{2})}", "3i", True),
    (r"\boxed{2\operatorname{cis}(120^\circ)}", r"-1+\sqrt{3}i", True),
    (r"\boxed{2\begin{pmatrix}1&-3\\0&5\end{pmatrix}}", r"\begin{pmatrix}2&-6\\0&10\end{pmatrix}", True),
    (r"\boxed{\begin{pmatrix}2&-6\\0&10\end{pmatrix}}", r"2\begin{pmatrix}1&-3\\0&5\end{pmatrix}", True),
    (
        r"\boxed{\frac{1}{3}\begin{pmatrix}3&6\\9&-3\end{pmatrix}}",
        r"\begin{pmatrix}1&2\\3&-1\end{pmatrix}",
        True,
    ),
    (r"\boxed{\sqrt2\begin{pmatrix}1\\1\end{pmatrix}}", r"\begin{pmatrix}\sqrt2\\\sqrt2\end{pmatrix}", True),
    (r"\boxed{|w|}", r"\sqrt{w^2}", True),
    (r"\boxed{\sqrt{w^2}}", r"|w|", True),
    (r"\boxed{\sqrt[3]{w^3}}", "w", True),
    (r"\boxed{\sqrt{w^4}}", "w^2", True),
]

ALL = {
    "committed": COMMITTED,
    "reasoning_tags": REASONING_TAGS,
    "quoted": QUOTED,
    "units": UNITS,
    "repeating": REPEATING,
    "locale": LOCALE,
    "intervals": INTERVALS,
    "cas_proofs": CAS_PROOFS,
}
