"""A cooperative coding problem set written for trl-marl: small two-step problems where a helper is natural.

MAGRPO's coding task ([`~trl_marl.envs.coding.CooperativeCodingEnv`]) has a helper agent write `aux` and a main
agent write the function the problem asks for. On HumanEval a small model passes almost nothing, so a team of small
models has no signal to learn from. These problems are sized for such models: each asks for one function whose work
splits into a step that is worth a function of its own (a check, a conversion, a parse: "is this a prime?",
"the vowels of a word", "the digit sum of a number") and a loop or aggregate over it.

Every problem is in HumanEval's schema (`task_id`, `prompt`, `entry_point`, `test`, `canonical_solution`) plus
`family` (the helper concept; related problems share it), `helper_solution` (the reference `aux`) and the helper's
contract, `helper_signature` and `helper_doc`, which [`~trl_marl.envs.coding.CooperativeCodingEnv`] shows to both
agents (the helper agent writes that function, the main agent may call it). The prompt
shows the signature, one sentence and one example; the tests in `test` (`check(candidate)`, four or more asserts)
are hidden from the agents and include edge cases the example does not show. `canonical_solution` is a whole
program, reference helper first, so CodeBLEU compares a team's helper + main with a helper + main.

**Held-out split by family.** [`team_coding_split`] splits the *families*, not the problems, into training and
held-out ones (a fixed list, chosen before any model was run on them): no held-out problem shares its helper concept
with a training problem, so a team that scores on the held-out problems has learned to cooperate on new code, not
recalled a neighbour of a training problem.

Written for this project (same licence as trl-marl); no problem is copied from HumanEval, MBPP or any other set.

Example:

```python
>>> from trl_marl.data.team_coding import TEAM_CODING_PROBLEMS, load_team_coding
>>> train, heldout = load_team_coding("train"), load_team_coding("heldout")
>>> len(train) + len(heldout) == len(TEAM_CODING_PROBLEMS)
True
```
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets


@dataclass(frozen=True)
class TeamCodingProblem:
    """One problem: the function to write, one visible example, the hidden tests and a reference helper + main.

    Attributes:
        family (`str`): The helper concept; the train/held-out split is by family.
        entry_point (`str`): The function the main agent writes.
        signature (`str`): Its parameters and return annotation, e.g. `"(words: list) -> int"`.
        doc (`str`): One sentence: what it returns.
        example (`tuple[str, str]`): A visible call and its result, e.g. `("f([1, 2])", "3")`.
        helper (`str`): A reference helper `aux`.
        helper_signature (`str`): The helper's parameters, e.g. `"(word)"`.
        helper_doc (`str`): One sentence: what the helper returns.
        main (`str`): A reference main function that calls `aux`.
        tests (`tuple[str, ...]`): Hidden asserts over `candidate`.
    """

    family: str
    entry_point: str
    signature: str
    doc: str
    example: tuple[str, str]
    helper: str
    main: str
    tests: tuple[str, ...]
    helper_signature: str = ""
    helper_doc: str = ""
    level: int = 2

    def prompt(self) -> str:
        """The signature and docstring the agents see."""
        call, result = self.example
        return (f"def {self.entry_point}{self.signature}:\n    \"\"\"{self.doc}\n\n    >>> {call}\n    {result}\n"
                f"    \"\"\"\n")

    def test(self) -> str:
        """HumanEval's `check(candidate)` with the hidden asserts."""
        return "def check(candidate):\n" + "".join(f"    assert {t}\n" for t in self.tests)

    def row(self, index: int) -> dict[str, Any]:
        """The problem as a row of HumanEval's schema plus `family` and `helper_solution`."""
        return {"task_id": f"TeamCoding/{index}", "prompt": self.prompt(), "entry_point": self.entry_point,
                "test": self.test(), "canonical_solution": f"{self.helper}\n\n\n{self.main}\n",
                "helper_solution": self.helper, "helper_signature": self.helper_signature,
                "helper_doc": self.helper_doc, "family": self.family, "level": self.level}


def _p(family: str, entry_point: str, signature: str, doc: str, example: tuple[str, str], helper: str, main: str,
       *tests: str) -> TeamCodingProblem:
    helper_signature, helper_doc = HELPER_CONTRACTS[family]
    return TeamCodingProblem(family, entry_point, signature, doc, example, helper.strip("\n"), main.strip("\n"),
                             tests, helper_signature, helper_doc, level=1 if family in LEVEL_1_FAMILIES else 2)


LEVEL_1_FAMILIES = frozenset({"square", "even", "positive", "upper", "reverse", "length", "first_letter", "double",
                              "vowel_char", "last_digit", "cube", "fahrenheit"})
"""The families of level 1: a one-line helper and a one-line main."""


VOWELS = "def aux(word):\n    return sum(1 for c in word.lower() if c in 'aeiou')"
PRIME = ("def aux(n):\n    if n < 2:\n        return False\n    for d in range(2, int(n ** 0.5) + 1):\n"
         "        if n % d == 0:\n            return False\n    return True")
PALINDROME = "def aux(word):\n    w = word.lower()\n    return w == w[::-1]"
DIGIT_SUM = "def aux(n):\n    return sum(int(d) for d in str(abs(n)))"
GCD = "def aux(a, b):\n    while b:\n        a, b = b, a % b\n    return abs(a)"
C_TO_F = "def aux(c):\n    return c * 9 / 5 + 32"
COUNTS = ("def aux(items):\n    counts = {}\n    for x in items:\n        counts[x] = counts.get(x, 0) + 1\n"
          "    return counts")
SHIFT = ("def aux(c, k):\n    if 'a' <= c <= 'z':\n        return chr((ord(c) - ord('a') + k) % 26 + ord('a'))\n"
         "    return c")
EVEN = "def aux(n):\n    return n % 2 == 0"
SQUARE = "def aux(n):\n    if n < 0:\n        return False\n    r = int(n ** 0.5)\n    return r * r == n"
FACTORIAL = "def aux(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result"
LEAP = "def aux(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)"
WORDS = "def aux(text):\n    return text.split()"
DIST = "def aux(p, q):\n    return ((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2) ** 0.5"
SORTED_LETTERS = "def aux(word):\n    return ''.join(sorted(word.lower().replace(' ', '')))"
NUMBERS = "import re\n\n\ndef aux(text):\n    return [int(m) for m in re.findall(r'[0-9]+', text)]"
PAIRS = ("def aux(text):\n    out = {}\n    for part in text.split(';'):\n        if part:\n"
         "            key, value = part.split('=')\n            out[key] = int(value)\n    return out")
GRADE = ("def aux(score):\n    for cut, letter in ((90, 'A'), (80, 'B'), (70, 'C'), (60, 'D')):\n"
         "        if score >= cut:\n            return letter\n    return 'F'")
BINARY = "def aux(n):\n    return bin(n)[2:]"
COLLATZ = ("def aux(n):\n    steps = 0\n    while n != 1:\n        n = n // 2 if n % 2 == 0 else 3 * n + 1\n"
           "        steps += 1\n    return steps")
DIVISORS = "def aux(n):\n    return [d for d in range(1, n + 1) if n % d == 0]"
RUNS = ("def aux(text):\n    runs = []\n    for c in text:\n        if runs and runs[-1][0] == c:\n"
        "            runs[-1][1] += 1\n        else:\n            runs.append([c, 1])\n    return runs")
VALID = ("def aux(password):\n    return len(password) >= 8 and any(c.isdigit() for c in password) and "
         "any(c.isupper() for c in password)")
CLEAN = "def aux(text):\n    return ''.join(c.lower() for c in text if c.isalnum())"
BRACKETS = ("def aux(c):\n    return {')': '(', ']': '[', '}': '{'}.get(c)")

HELPER_CONTRACTS: dict[str, tuple[str, str]] = {
    "vowels": ("(word: str) -> int", "Return the number of vowels (a, e, i, o, u, in either case) in `word`."),
    "primes": ("(n: int) -> bool", "Return True if the integer `n` is a prime number."),
    "palindromes": ("(word: str) -> bool", "Return True if `word` reads the same backwards, ignoring case."),
    "clean_text": ("(text: str) -> str", "Return the letters and digits of `text`, lower-cased, in order."),
    "digit_sum": ("(n: int) -> int", "Return the sum of the decimal digits of the integer `n`, ignoring its sign."),
    "words": ("(text: str) -> list", "Return the space-separated words of `text`."),
    "gcd": ("(a: int, b: int) -> int", "Return the greatest common divisor of `a` and `b` (never negative)."),
    "temperature": ("(c: float) -> float", "Return the Celsius temperature `c` in Fahrenheit."),
    "counting": ("(items: list) -> dict", "Return a dict from each item of `items` to how many times it occurs."),
    "caesar": ("(c: str, k: int) -> str",
               "Shift the lowercase letter `c` by `k` places in the alphabet (wrapping around); return other "
               "characters unchanged."),
    "parity": ("(n: int) -> bool", "Return True if the integer `n` is even."),
    "squares": ("(n: int) -> bool", "Return True if the integer `n` is a perfect square (negative numbers are not)."),
    "factorial": ("(n: int) -> int", "Return n! for an integer `n` >= 0."),
    "leap_year": ("(year: int) -> bool", "Return True if `year` is a leap year in the Gregorian calendar."),
    "distance": ("(p: tuple, q: tuple) -> float",
                 "Return the Euclidean distance between the points (x, y) `p` and `q`."),
    "anagram": ("(word: str) -> str", "Return the letters of `word`, lower-cased and without spaces, sorted."),
    "numbers_in_text": ("(text: str) -> list", "Return the runs of digits in `text` as a list of ints, in order."),
    "pairs": ("(text: str) -> dict",
              "Parse 'key=number;key=number' into a dict from key to int (a later key wins; '' gives {})."),
    "grades": ("(score: float) -> str", "Return the letter of `score`: 90 and up A, 80 B, 70 C, 60 D, below 60 F."),
    "binary": ("(n: int) -> str", "Return the non-negative integer `n` in binary, as a string without a prefix."),
    "collatz": ("(n: int) -> int",
                "Return how many steps n -> n/2 (n even) or 3n+1 (n odd) take the positive integer `n` to 1."),
    "divisors": ("(n: int) -> list", "Return the positive divisors of the positive integer `n`, in increasing order."),
    "runs": ("(text: str) -> list",
             "Return the runs of repeated characters of `text` as [character, length] lists, in order."),
    "passwords": ("(password: str) -> bool",
                  "Return True if `password` has at least 8 characters, a digit and an uppercase letter."),
    "brackets": ("(c: str) -> str",
                 "Return the opening bracket that matches the closing bracket `c` (one of ), ], }), else None."),
    # level 1
    "square": ("(x: int) -> int", "Return `x` squared."),
    "even": ("(n: int) -> bool", "Return True if `n` is even."),
    "positive": ("(n: int) -> bool", "Return True if `n` is greater than zero."),
    "upper": ("(word: str) -> str", "Return `word` in capital letters."),
    "reverse": ("(text: str) -> str", "Return `text` written backwards."),
    "length": ("(text: str) -> int", "Return the number of characters of `text`."),
    "first_letter": ("(word: str) -> str", "Return the first character of `word`."),
    "double": ("(x: int) -> int", "Return `x` multiplied by 2."),
    "vowel_char": ("(c: str) -> bool", "Return True if the character `c` is a vowel (a, e, i, o, u, either case)."),
    "last_digit": ("(n: int) -> int", "Return the last decimal digit of the integer `n`, ignoring its sign."),
    "cube": ("(x: int) -> int", "Return `x` cubed."),
    "fahrenheit": ("(c: float) -> float", "Return the Celsius temperature `c` in Fahrenheit (F = C * 9 / 5 + 32)."),
}
"""Each family's helper contract: its parameters and its one-sentence docstring, shown to both agents."""


SQUARE1 = "def aux(x):\n    return x * x"
POSITIVE = "def aux(n):\n    return n > 0"
UPPER = "def aux(word):\n    return word.upper()"
REVERSE = "def aux(text):\n    return text[::-1]"
LENGTH = "def aux(text):\n    return len(text)"
FIRST = "def aux(word):\n    return word[0]"
DOUBLE = "def aux(x):\n    return 2 * x"
IS_VOWEL = "def aux(c):\n    return c.lower() in 'aeiou'"
LAST_DIGIT = "def aux(n):\n    return abs(n) % 10"
CUBE = "def aux(x):\n    return x ** 3"

TEAM_CODING_PROBLEMS: tuple[TeamCodingProblem, ...] = (
    # ----- vowels
    _p("vowels", "count_vowels_per_word", "(sentence: str) -> list",
       "Return the number of vowels (a, e, i, o, u, in either case) in each space-separated word of `sentence`.",
       ("count_vowels_per_word('hello big world')", "[2, 1, 1]"), VOWELS,
       "def count_vowels_per_word(sentence):\n    return [aux(w) for w in sentence.split()]",
       "candidate('a e i') == [1, 1, 1]", "candidate('Sky') == [0]", "candidate('') == []",
       "candidate('Banana APPLE') == [3, 2]"),
    _p("vowels", "word_with_most_vowels", "(sentence: str) -> str",
       "Return the first word of `sentence` that has the most vowels (a, e, i, o, u, in either case).",
       ("word_with_most_vowels('the quick brown fox')", "'quick'"), VOWELS,
       "def word_with_most_vowels(sentence):\n    words = sentence.split()\n    return max(words, key=aux)",
       "candidate('sky is blue') == 'blue'", "candidate('aa bb ee') == 'aa'", "candidate('Oil tea') == 'Oil'",
       "candidate('rhythm') == 'rhythm'"),
    _p("vowels", "remove_vowels", "(text: str) -> str",
       "Return `text` without its vowels (a, e, i, o, u, in either case).",
       ("remove_vowels('banana')", "'bnn'"), VOWELS,
       "def remove_vowels(text):\n    return ''.join(c for c in text if aux(c) == 0)",
       "candidate('Hello World') == 'Hll Wrld'", "candidate('AEIOU') == ''", "candidate('xyz') == 'xyz'",
       "candidate('') == ''"),
    # ----- primes
    _p("primes", "count_primes", "(numbers: list) -> int",
       "Return how many of the integers in `numbers` are prime.",
       ("count_primes([2, 3, 4, 5, 6])", "3"), PRIME,
       "def count_primes(numbers):\n    return sum(1 for n in numbers if aux(n))",
       "candidate([1, 0, -7]) == 0", "candidate([11, 13, 15]) == 2", "candidate([]) == 0",
       "candidate([97, 100, 2]) == 2"),
    _p("primes", "primes_below", "(n: int) -> list",
       "Return the prime numbers smaller than `n`, in increasing order.",
       ("primes_below(10)", "[2, 3, 5, 7]"), PRIME,
       "def primes_below(n):\n    return [k for k in range(n) if aux(k)]",
       "candidate(2) == []", "candidate(3) == [2]", "candidate(20) == [2, 3, 5, 7, 11, 13, 17, 19]",
       "candidate(1) == []"),
    _p("primes", "sum_of_primes", "(numbers: list) -> int",
       "Return the sum of the prime numbers in `numbers`.",
       ("sum_of_primes([1, 2, 3, 4])", "5"), PRIME,
       "def sum_of_primes(numbers):\n    return sum(n for n in numbers if aux(n))",
       "candidate([]) == 0", "candidate([4, 6, 8]) == 0", "candidate([5, 7, 9]) == 12", "candidate([2, 2]) == 4"),
    # ----- palindromes
    _p("palindromes", "count_palindromes", "(words: list) -> int",
       "Return how many strings in `words` read the same backwards, ignoring case.",
       ("count_palindromes(['level', 'hello', 'Anna'])", "2"), PALINDROME,
       "def count_palindromes(words):\n    return sum(1 for w in words if aux(w))",
       "candidate(['a', 'ab', 'aba']) == 2", "candidate([]) == 0", "candidate(['Noon', 'moon']) == 1",
       "candidate(['racecar', 'xyz', 'kayak']) == 2"),
    _p("palindromes", "longest_palindrome_word", "(sentence: str) -> str",
       "Return the first longest word of `sentence` that reads the same backwards (ignoring case), or '' if none.",
       ("longest_palindrome_word('my mom saw a racecar')", "'racecar'"), PALINDROME,
       "def longest_palindrome_word(sentence):\n    best = ''\n    for w in sentence.split():\n"
       "        if aux(w) and len(w) > len(best):\n            best = w\n    return best",
       "candidate('hello world') == ''", "candidate('wow level') == 'level'", "candidate('a b') == 'a'",
       "candidate('') == ''"),
    # ----- sentence palindromes need a cleaning step
    _p("clean_text", "is_palindrome_sentence", "(text: str) -> bool",
       "Return True if `text` reads the same backwards when only its letters and digits are kept, ignoring case.",
       ("is_palindrome_sentence('Never odd or even')", "True"), CLEAN,
       "def is_palindrome_sentence(text):\n    t = aux(text)\n    return t == t[::-1]",
       "candidate('A man, a plan, a canal: Panama') is True", "candidate('hello') is False",
       "candidate('') is True", "candidate('No lemon, no melon') is True", "candidate('ab') is False"),
    _p("clean_text", "count_letters_and_digits", "(text: str) -> int",
       "Return how many characters of `text` are letters or digits.",
       ("count_letters_and_digits('Hi, 2 you!')", "6"), CLEAN,
       "def count_letters_and_digits(text):\n    return len(aux(text))",
       "candidate('') == 0", "candidate('!!!') == 0", "candidate('abc 123') == 6", "candidate('a-b_c') == 3"),
    # ----- digit sums
    _p("digit_sum", "digit_sums", "(numbers: list) -> list",
       "Return the sum of the decimal digits of each integer in `numbers` (the sign is ignored).",
       ("digit_sums([12, 305])", "[3, 8]"), DIGIT_SUM,
       "def digit_sums(numbers):\n    return [aux(n) for n in numbers]",
       "candidate([0]) == [0]", "candidate([-45]) == [9]", "candidate([999, 1]) == [27, 1]", "candidate([]) == []"),
    _p("digit_sum", "largest_digit_sum", "(numbers: list) -> int",
       "Return the first integer of `numbers` whose digit sum (sign ignored) is the largest.",
       ("largest_digit_sum([19, 55, 90])", "19"), DIGIT_SUM,
       "def largest_digit_sum(numbers):\n    return max(numbers, key=aux)",
       "candidate([1, 2, 3]) == 3", "candidate([100, 11]) == 11", "candidate([-99, 5]) == -99",
       "candidate([7]) == 7"),
    _p("digit_sum", "is_harshad", "(n: int) -> bool",
       "Return True if the positive integer `n` is divisible by the sum of its digits.",
       ("is_harshad(18)", "True"), DIGIT_SUM,
       "def is_harshad(n):\n    return n % aux(n) == 0",
       "candidate(19) is False", "candidate(21) is True", "candidate(1) is True", "candidate(11) is False"),
    # ----- words
    _p("words", "longest_word", "(sentence: str) -> str",
       "Return the first longest space-separated word of `sentence`, or '' if there is none.",
       ("longest_word('I love programming')", "'programming'"), WORDS,
       "def longest_word(sentence):\n    best = ''\n    for w in aux(sentence):\n        if len(w) > len(best):\n"
       "            best = w\n    return best",
       "candidate('a bb cc') == 'bb'", "candidate('one') == 'one'", "candidate('') == ''",
       "candidate('tie tie') == 'tie'"),
    _p("words", "average_word_length", "(sentence: str) -> float",
       "Return the average length of the words of `sentence`, rounded to 2 decimals (0.0 if there are none).",
       ("average_word_length('hi there')", "3.5"), WORDS,
       "def average_word_length(sentence):\n    words = aux(sentence)\n    if not words:\n        return 0.0\n"
       "    return round(sum(len(w) for w in words) / len(words), 2)",
       "candidate('a') == 1.0", "candidate('') == 0.0", "candidate('abc de') == 2.5",
       "candidate('one two three') == 3.67"),
    _p("words", "count_words_longer_than", "(sentence: str, n: int) -> int",
       "Return how many words of `sentence` have more than `n` letters.",
       ("count_words_longer_than('a tiny example', 3)", "2"), WORDS,
       "def count_words_longer_than(sentence, n):\n    return sum(1 for w in aux(sentence) if len(w) > n)",
       "candidate('', 0) == 0", "candidate('xx yyy', 3) == 0", "candidate('hello hi', 1) == 2",
       "candidate('hello hi', 2) == 1"),
    # ----- gcd
    _p("gcd", "gcd_of_list", "(numbers: list) -> int",
       "Return the greatest common divisor of the non-negative integers in `numbers` (not all zero).",
       ("gcd_of_list([12, 18, 24])", "6"), GCD,
       "def gcd_of_list(numbers):\n    g = 0\n    for n in numbers:\n        g = aux(g, n)\n    return g",
       "candidate([7]) == 7", "candidate([5, 10]) == 5", "candidate([9, 28]) == 1", "candidate([0, 4]) == 4"),
    _p("gcd", "lcm", "(a: int, b: int) -> int",
       "Return the least common multiple of the positive integers `a` and `b`.",
       ("lcm(4, 6)", "12"), GCD,
       "def lcm(a, b):\n    return a * b // aux(a, b)",
       "candidate(3, 5) == 15", "candidate(7, 7) == 7", "candidate(1, 9) == 9", "candidate(12, 18) == 36"),
    _p("gcd", "simplify_fraction", "(numerator: int, denominator: int) -> tuple",
       "Return the fraction numerator/denominator (denominator > 0) in lowest terms, as a tuple.",
       ("simplify_fraction(6, 8)", "(3, 4)"), GCD,
       "def simplify_fraction(numerator, denominator):\n    g = aux(numerator, denominator)\n"
       "    return (numerator // g, denominator // g)",
       "candidate(10, 5) == (2, 1)", "candidate(3, 7) == (3, 7)", "candidate(0, 5) == (0, 1)",
       "candidate(-4, 6) == (-2, 3)"),
    # ----- temperatures
    _p("temperature", "fahrenheit_list", "(celsius: list) -> list",
       "Convert each Celsius temperature in `celsius` to Fahrenheit, rounded to 1 decimal.",
       ("fahrenheit_list([0, 100])", "[32.0, 212.0]"), C_TO_F,
       "def fahrenheit_list(celsius):\n    return [round(aux(c), 1) for c in celsius]",
       "candidate([]) == []", "candidate([-40]) == [-40.0]", "candidate([37]) == [98.6]",
       "candidate([20.5]) == [68.9]"),
    _p("temperature", "average_fahrenheit", "(celsius: list) -> float",
       "Return the average of the Celsius temperatures `celsius` in Fahrenheit, rounded to 1 decimal.",
       ("average_fahrenheit([0, 10])", "41.0"), C_TO_F,
       "def average_fahrenheit(celsius):\n    return round(sum(aux(c) for c in celsius) / len(celsius), 1)",
       "candidate([100]) == 212.0", "candidate([-40, 40]) == 32.0", "candidate([1, 2, 3]) == 35.6",
       "candidate([0]) == 32.0"),
    _p("temperature", "hottest_in_fahrenheit", "(celsius: list) -> float",
       "Return the highest of the Celsius temperatures `celsius` in Fahrenheit, rounded to 1 decimal.",
       ("hottest_in_fahrenheit([10, 30, 20])", "86.0"), C_TO_F,
       "def hottest_in_fahrenheit(celsius):\n    return round(max(aux(c) for c in celsius), 1)",
       "candidate([0]) == 32.0", "candidate([-5, -10]) == 23.0", "candidate([36.6, 36.7]) == 98.1",
       "candidate([100, -100]) == 212.0"),
    # ----- counting
    _p("counting", "most_common", "(items: list)",
       "Return the item that occurs most often in `items`; on a tie, the one that occurs first.",
       ("most_common([1, 2, 2, 3])", "2"), COUNTS,
       "def most_common(items):\n    counts = aux(items)\n    return max(items, key=lambda x: counts[x])",
       "candidate(['a']) == 'a'", "candidate([3, 3, 1, 1]) == 3", "candidate([5, 4, 4, 5, 5]) == 5",
       "candidate(['x', 'y', 'y']) == 'y'"),
    _p("counting", "count_unique_words", "(sentence: str) -> int",
       "Return how many different words `sentence` has, ignoring case.",
       ("count_unique_words('the cat and The dog')", "4"), COUNTS,
       "def count_unique_words(sentence):\n    return len(aux(sentence.lower().split()))",
       "candidate('') == 0", "candidate('a a a') == 1", "candidate('Hi hi HI there') == 2",
       "candidate('one two') == 2"),
    _p("counting", "items_seen_once", "(items: list) -> list",
       "Return the items of `items` that occur exactly once, in their order.",
       ("items_seen_once([1, 2, 1, 3])", "[2, 3]"), COUNTS,
       "def items_seen_once(items):\n    counts = aux(items)\n    return [x for x in items if counts[x] == 1]",
       "candidate([]) == []", "candidate(['a', 'a']) == []", "candidate([3, 2, 1]) == [3, 2, 1]",
       "candidate([1, 1, 2, 3, 3]) == [2]"),
    # ----- caesar
    _p("caesar", "caesar", "(text: str, shift: int) -> str",
       "Shift each lowercase letter of `text` by `shift` places in the alphabet (wrapping z to a); keep the rest.",
       ("caesar('abc', 1)", "'bcd'"), SHIFT,
       "def caesar(text, shift):\n    return ''.join(aux(c, shift) for c in text)",
       "candidate('xyz', 2) == 'zab'", "candidate('hello world', 13) == 'uryyb jbeyq'",
       "candidate('a-b', 1) == 'b-c'", "candidate('abc', 26) == 'abc'"),
    _p("caesar", "decode_caesar", "(text: str, shift: int) -> str",
       "Undo a shift of lowercase letters by `shift` places (wrapping a to z); keep every other character.",
       ("decode_caesar('bcd', 1)", "'abc'"), SHIFT,
       "def decode_caesar(text, shift):\n    return ''.join(aux(c, -shift) for c in text)",
       "candidate('zab', 2) == 'xyz'", "candidate('uryyb', 13) == 'hello'", "candidate('a b', 0) == 'a b'",
       "candidate('cde!', 2) == 'abc!'"),
    # ----- parity
    _p("parity", "sum_of_evens", "(numbers: list) -> int",
       "Return the sum of the even integers in `numbers`.",
       ("sum_of_evens([1, 2, 3, 4])", "6"), EVEN,
       "def sum_of_evens(numbers):\n    return sum(n for n in numbers if aux(n))",
       "candidate([]) == 0", "candidate([1, 3]) == 0", "candidate([-2, 2, 5]) == 0", "candidate([10]) == 10"),
    _p("parity", "count_evens_and_odds", "(numbers: list) -> tuple",
       "Return a tuple (how many integers in `numbers` are even, how many are odd).",
       ("count_evens_and_odds([1, 2, 3])", "(1, 2)"), EVEN,
       "def count_evens_and_odds(numbers):\n    evens = sum(1 for n in numbers if aux(n))\n"
       "    return (evens, len(numbers) - evens)",
       "candidate([]) == (0, 0)", "candidate([0]) == (1, 0)", "candidate([-1, -2, 7]) == (1, 2)",
       "candidate([2, 4]) == (2, 0)"),
    _p("parity", "mean_of_odds", "(numbers: list) -> float",
       "Return the mean of the odd integers in `numbers` (0.0 if there are none).",
       ("mean_of_odds([1, 2, 3])", "2.0"), EVEN,
       "def mean_of_odds(numbers):\n    odds = [n for n in numbers if not aux(n)]\n"
       "    return sum(odds) / len(odds) if odds else 0.0",
       "candidate([2, 4]) == 0.0", "candidate([5]) == 5.0", "candidate([1, 4, 6, 7]) == 4.0",
       "candidate([-3, 3]) == 0.0"),
    # ----- perfect squares
    _p("squares", "perfect_square_flags", "(numbers: list) -> list",
       "Return, for each integer in `numbers`, whether it is a perfect square (0 is; negative numbers are not).",
       ("perfect_square_flags([4, 5, 9])", "[True, False, True]"), SQUARE,
       "def perfect_square_flags(numbers):\n    return [aux(n) for n in numbers]",
       "candidate([0]) == [True]", "candidate([-4]) == [False]", "candidate([1, 2, 16]) == [True, False, True]",
       "candidate([]) == []"),
    _p("squares", "count_perfect_squares", "(numbers: list) -> int",
       "Return how many integers in `numbers` are perfect squares (0 is; negative numbers are not).",
       ("count_perfect_squares([1, 2, 3, 4])", "2"), SQUARE,
       "def count_perfect_squares(numbers):\n    return sum(1 for n in numbers if aux(n))",
       "candidate([]) == 0", "candidate([0, -1]) == 1", "candidate([25, 26, 36]) == 2", "candidate([2, 3]) == 0"),
    # ----- factorials
    _p("factorial", "sum_of_factorials", "(n: int) -> int",
       "Return 1! + 2! + ... + n! (0 when n is 0).",
       ("sum_of_factorials(3)", "9"), FACTORIAL,
       "def sum_of_factorials(n):\n    return sum(aux(k) for k in range(1, n + 1))",
       "candidate(0) == 0", "candidate(1) == 1", "candidate(4) == 33", "candidate(5) == 153"),
    _p("factorial", "factorial_digits", "(n: int) -> int",
       "Return the number of decimal digits of n! (n >= 0).",
       ("factorial_digits(5)", "3"), FACTORIAL,
       "def factorial_digits(n):\n    return len(str(aux(n)))",
       "candidate(0) == 1", "candidate(10) == 7", "candidate(3) == 1", "candidate(7) == 4"),
    _p("factorial", "binomial", "(n: int, k: int) -> int",
       "Return the number of ways to choose `k` items out of `n` (0 <= k <= n).",
       ("binomial(5, 2)", "10"), FACTORIAL,
       "def binomial(n, k):\n    return aux(n) // (aux(k) * aux(n - k))",
       "candidate(4, 0) == 1", "candidate(6, 3) == 20", "candidate(10, 1) == 10", "candidate(3, 3) == 1"),
    # ----- leap years
    _p("leap_year", "count_leap_years", "(years: list) -> int",
       "Return how many of `years` are leap years in the Gregorian calendar.",
       ("count_leap_years([2000, 1900, 2024])", "2"), LEAP,
       "def count_leap_years(years):\n    return sum(1 for y in years if aux(y))",
       "candidate([]) == 0", "candidate([2023]) == 0", "candidate([1600, 1700, 1996]) == 2",
       "candidate([2004, 2008]) == 2"),
    _p("leap_year", "days_in_month", "(year: int, month: int) -> int",
       "Return the number of days of month `month` (1-12) of `year` in the Gregorian calendar.",
       ("days_in_month(2024, 2)", "29"), LEAP,
       "def days_in_month(year, month):\n    if month == 2:\n        return 29 if aux(year) else 28\n"
       "    return 30 if month in (4, 6, 9, 11) else 31",
       "candidate(2023, 2) == 28", "candidate(2023, 1) == 31", "candidate(2023, 4) == 30",
       "candidate(1900, 2) == 28", "candidate(2000, 2) == 29"),
    # ----- geometry
    _p("distance", "path_length", "(points: list) -> float",
       "Return the length of the path through the (x, y) `points` in order, rounded to 2 decimals.",
       ("path_length([(0, 0), (3, 4)])", "5.0"), DIST,
       "def path_length(points):\n    return round(sum(aux(p, q) for p, q in zip(points, points[1:])), 2)",
       "candidate([(0, 0)]) == 0.0", "candidate([]) == 0.0", "candidate([(0, 0), (1, 0), (1, 1)]) == 2.0",
       "candidate([(0, 0), (1, 1)]) == 1.41"),
    _p("distance", "closest_to_origin", "(points: list) -> tuple",
       "Return the first of the (x, y) `points` that is closest to (0, 0).",
       ("closest_to_origin([(3, 4), (1, 1), (0, 2)])", "(1, 1)"), DIST,
       "def closest_to_origin(points):\n    return min(points, key=lambda p: aux(p, (0, 0)))",
       "candidate([(5, 5)]) == (5, 5)", "candidate([(0, -1), (1, 0)]) == (0, -1)",
       "candidate([(2, 2), (-1, -1)]) == (-1, -1)", "candidate([(3, 0), (0, 3), (2, 2)]) == (2, 2)"),
    _p("distance", "perimeter", "(points: list) -> float",
       "Return the perimeter of the polygon with corners `points` (x, y) in order, rounded to 2 decimals.",
       ("perimeter([(0, 0), (0, 1), (1, 1), (1, 0)])", "4.0"), DIST,
       "def perimeter(points):\n    n = len(points)\n"
       "    return round(sum(aux(points[i], points[(i + 1) % n]) for i in range(n)), 2)",
       "candidate([(0, 0), (3, 0), (0, 4)]) == 12.0", "candidate([(0, 0), (2, 0)]) == 4.0",
       "candidate([(1, 1), (1, 1), (1, 1)]) == 0.0", "candidate([(0, 0), (1, 1), (2, 0)]) == 4.83"),
    # ----- anagrams
    _p("anagram", "are_anagrams", "(a: str, b: str) -> bool",
       "Return True if `a` and `b` use the same letters the same number of times, ignoring case and spaces.",
       ("are_anagrams('listen', 'silent')", "True"), SORTED_LETTERS,
       "def are_anagrams(a, b):\n    return aux(a) == aux(b)",
       "candidate('Dormitory', 'dirty room') is True", "candidate('abc', 'abd') is False",
       "candidate('', '') is True", "candidate('aab', 'abb') is False"),
    _p("anagram", "count_anagram_groups", "(words: list) -> int",
       "Return how many groups of anagrams `words` forms (words with the same letters, ignoring case).",
       ("count_anagram_groups(['eat', 'tea', 'tan', 'ate', 'nat', 'bat'])", "3"), SORTED_LETTERS,
       "def count_anagram_groups(words):\n    return len({aux(w) for w in words})",
       "candidate([]) == 0", "candidate(['a']) == 1", "candidate(['ab', 'ba', 'abc']) == 2",
       "candidate(['Tea', 'eat', 'x']) == 2"),
    # ----- numbers in text
    _p("numbers_in_text", "sum_numbers_in_text", "(text: str) -> int",
       "Return the sum of the whole numbers written with digits in `text` (each run of digits is one number).",
       ("sum_numbers_in_text('I have 3 apples and 12 pears')", "15"), NUMBERS,
       "def sum_numbers_in_text(text):\n    return sum(aux(text))",
       "candidate('none') == 0", "candidate('1a2b3') == 6", "candidate('100') == 100", "candidate('') == 0"),
    _p("numbers_in_text", "largest_number_in_text", "(text: str) -> int",
       "Return the largest run of digits in `text` read as a number, or -1 if `text` has no digit.",
       ("largest_number_in_text('a1b22c3')", "22"), NUMBERS,
       "def largest_number_in_text(text):\n    numbers = aux(text)\n    return max(numbers) if numbers else -1",
       "candidate('abc') == -1", "candidate('7') == 7", "candidate('10 and 9') == 10", "candidate('x 05 4') == 5"),
    _p("numbers_in_text", "count_numbers_in_text", "(text: str) -> int",
       "Return how many runs of digits `text` contains.",
       ("count_numbers_in_text('a1b22c3')", "3"), NUMBERS,
       "def count_numbers_in_text(text):\n    return len(aux(text))",
       "candidate('') == 0", "candidate('abc') == 0", "candidate('12 34') == 2", "candidate('007') == 1"),
    # ----- key=value pairs
    _p("pairs", "parse_pairs", "(text: str) -> dict",
       "Parse `text` of the form 'key=number;key=number' into a dict of int values (a later key wins).",
       ("parse_pairs('x=5;y=10')", "{'x': 5, 'y': 10}"), PAIRS,
       "def parse_pairs(text):\n    return aux(text)",
       "candidate('') == {}", "candidate('k=0') == {'k': 0}", "candidate('a=1;a=2') == {'a': 2}",
       "candidate('one=1;two=22') == {'one': 1, 'two': 22}"),
    _p("pairs", "sum_of_values", "(text: str) -> int",
       "Return the sum of the values in `text` of the form 'key=number;key=number' (a later key wins).",
       ("sum_of_values('x=5;y=10')", "15"), PAIRS,
       "def sum_of_values(text):\n    return sum(aux(text).values())",
       "candidate('') == 0", "candidate('k=7') == 7", "candidate('a=1;b=2;c=3') == 6", "candidate('a=1;a=5') == 5"),
    # ----- grades
    _p("grades", "letter_grades", "(scores: list) -> list",
       "Return the letter of each score: 90 and up A, 80 B, 70 C, 60 D, below 60 F.",
       ("letter_grades([95, 72])", "['A', 'C']"), GRADE,
       "def letter_grades(scores):\n    return [aux(s) for s in scores]",
       "candidate([]) == []", "candidate([60, 59]) == ['D', 'F']", "candidate([80, 100, 0]) == ['B', 'A', 'F']",
       "candidate([89.5]) == ['B']"),
    _p("grades", "grade_counts", "(scores: list) -> dict",
       "Return how many scores got each letter (90 and up A, 80 B, 70 C, 60 D, below 60 F), letters seen only.",
       ("grade_counts([95, 91, 72])", "{'A': 2, 'C': 1}"), GRADE,
       "def grade_counts(scores):\n    out = {}\n    for s in scores:\n        out[aux(s)] = out.get(aux(s), 0) + 1\n"
       "    return out",
       "candidate([]) == {}", "candidate([50]) == {'F': 1}", "candidate([85, 65, 85]) == {'B': 2, 'D': 1}",
       "candidate([90, 89]) == {'A': 1, 'B': 1}"),
    # ----- binary
    _p("binary", "to_binary_list", "(numbers: list) -> list",
       "Return each non-negative integer of `numbers` written in binary, as a string without a prefix.",
       ("to_binary_list([2, 5])", "['10', '101']"), BINARY,
       "def to_binary_list(numbers):\n    return [aux(n) for n in numbers]",
       "candidate([0]) == ['0']", "candidate([]) == []", "candidate([1, 8]) == ['1', '1000']",
       "candidate([255]) == ['11111111']"),
    _p("binary", "count_one_bits", "(numbers: list) -> int",
       "Return the total number of 1 digits in the binary forms of the non-negative integers in `numbers`.",
       ("count_one_bits([3, 4])", "3"), BINARY,
       "def count_one_bits(numbers):\n    return sum(aux(n).count('1') for n in numbers)",
       "candidate([]) == 0", "candidate([0]) == 0", "candidate([255]) == 8", "candidate([1, 2, 4]) == 3"),
    # ----- collatz
    _p("collatz", "collatz_steps_list", "(numbers: list) -> list",
       "Return, for each positive integer n in `numbers`, how many steps (n -> n/2 if even, else 3n+1) reach 1.",
       ("collatz_steps_list([6, 1])", "[8, 0]"), COLLATZ,
       "def collatz_steps_list(numbers):\n    return [aux(n) for n in numbers]",
       "candidate([]) == []", "candidate([2]) == [1]", "candidate([3, 7]) == [7, 16]", "candidate([1, 1]) == [0, 0]"),
    _p("collatz", "longest_collatz", "(limit: int) -> int",
       "Return the n in 1..limit whose sequence n -> n/2 (even) or 3n+1 (odd) takes the most steps to reach 1 "
       "(the smallest such n).",
       ("longest_collatz(10)", "9"), COLLATZ,
       "def longest_collatz(limit):\n    return max(range(1, limit + 1), key=aux)",
       "candidate(1) == 1", "candidate(2) == 2", "candidate(3) == 3", "candidate(7) == 7"),
    # ----- divisors
    _p("divisors", "count_divisors_list", "(numbers: list) -> list",
       "Return, for each positive integer in `numbers`, how many positive divisors it has.",
       ("count_divisors_list([1, 6, 7])", "[1, 4, 2]"), DIVISORS,
       "def count_divisors_list(numbers):\n    return [len(aux(n)) for n in numbers]",
       "candidate([]) == []", "candidate([12]) == [6]", "candidate([16, 2]) == [5, 2]", "candidate([1]) == [1]"),
    _p("divisors", "is_abundant", "(n: int) -> bool",
       "Return True if the sum of the divisors of the positive integer `n` smaller than `n` is larger than `n`.",
       ("is_abundant(12)", "True"), DIVISORS,
       "def is_abundant(n):\n    return sum(aux(n)) - n > n",
       "candidate(6) is False", "candidate(18) is True", "candidate(1) is False", "candidate(20) is True"),
    _p("divisors", "perfect_numbers", "(limit: int) -> list",
       "Return the numbers up to `limit` that equal the sum of their divisors smaller than themselves.",
       ("perfect_numbers(30)", "[6, 28]"), DIVISORS,
       "def perfect_numbers(limit):\n    return [n for n in range(1, limit + 1) if sum(aux(n)) - n == n]",
       "candidate(5) == []", "candidate(6) == [6]", "candidate(500) == [6, 28, 496]", "candidate(27) == [6]"),
    # ----- run-length
    _p("runs", "run_length_encode", "(text: str) -> str",
       "Encode `text` as each character followed by how many times it repeats in a row.",
       ("run_length_encode('aaab')", "'a3b1'"), RUNS,
       "def run_length_encode(text):\n    return ''.join(f'{c}{n}' for c, n in aux(text))",
       "candidate('') == ''", "candidate('abc') == 'a1b1c1'", "candidate('zzzz') == 'z4'",
       "candidate('aabbba') == 'a2b3a1'"),
    _p("runs", "longest_run", "(text: str) -> int",
       "Return the length of the longest run of one repeated character in `text` (0 for '').",
       ("longest_run('abbbcc')", "3"), RUNS,
       "def longest_run(text):\n    return max((n for _, n in aux(text)), default=0)",
       "candidate('') == 0", "candidate('a') == 1", "candidate('aabbb') == 3", "candidate('xyz') == 1"),
    # ----- passwords
    _p("passwords", "count_valid_passwords", "(passwords: list) -> int",
       "Return how many passwords are valid: at least 8 characters, with a digit and an uppercase letter.",
       ("count_valid_passwords(['Password1', 'short1A', 'nodigitsHere'])", "1"), VALID,
       "def count_valid_passwords(passwords):\n    return sum(1 for p in passwords if aux(p))",
       "candidate([]) == 0", "candidate(['ABCDEFG1']) == 1", "candidate(['abcdefg1']) == 0",
       "candidate(['Aa1Aa1Aa1', '12345678']) == 1"),
    _p("passwords", "first_valid_password", "(passwords: list) -> str",
       "Return the first valid password (at least 8 characters, a digit, an uppercase letter), or '' if none.",
       ("first_valid_password(['abc', 'Secret123'])", "'Secret123'"), VALID,
       "def first_valid_password(passwords):\n    for p in passwords:\n        if aux(p):\n            return p\n"
       "    return ''",
       "candidate([]) == ''", "candidate(['abcdefgh']) == ''", "candidate(['X1xxxxxx', 'Y2yyyyyy']) == 'X1xxxxxx'",
       "candidate(['Short1', 'LongEnough9']) == 'LongEnough9'"),
    # ----- brackets
    _p("brackets", "is_balanced", "(text: str) -> bool",
       "Return True if the brackets (), [] and {} in `text` are balanced and properly nested.",
       ("is_balanced('(a[b]{c})')", "True"), BRACKETS,
       "def is_balanced(text):\n    stack = []\n    for c in text:\n        if c in '([{':\n"
       "            stack.append(c)\n"
       "        elif aux(c):\n            if not stack or stack.pop() != aux(c):\n                return False\n"
       "    return not stack",
       "candidate('(]') is False", "candidate('') is True", "candidate('((') is False",
       "candidate('{[()()]}') is True", "candidate(')(') is False"),
    _p("brackets", "count_unmatched_closers", "(text: str) -> int",
       "Return how many closing brackets ), ] or } in `text` have no open bracket of the same kind before them.",
       ("count_unmatched_closers('())]')", "2"), BRACKETS,
       "def count_unmatched_closers(text):\n    open_ = {'(': 0, '[': 0, '{': 0}\n    bad = 0\n    for c in text:\n"
       "        if c in open_:\n            open_[c] += 1\n        elif aux(c):\n            if open_[aux(c)]:\n"
       "                open_[aux(c)] -= 1\n            else:\n                bad += 1\n    return bad",
       "candidate('') == 0", "candidate('()') == 0", "candidate(']]') == 2", "candidate('([)]') == 0"),
    # ================================================================ level 1: one-line helpers, one-line mains
    _p("square", "squares", "(numbers: list) -> list",
       "Return the square of each number in `numbers`.",
       ("squares([1, 2, 3])", "[1, 4, 9]"), SQUARE1,
       "def squares(numbers):\n    return [aux(x) for x in numbers]",
       "candidate([]) == []", "candidate([-2]) == [4]", "candidate([0, 5]) == [0, 25]",
       "candidate([10, 1]) == [100, 1]"),
    _p("square", "sum_of_squares", "(numbers: list) -> int",
       "Return the sum of the squares of the numbers in `numbers`.",
       ("sum_of_squares([1, 2, 3])", "14"), SQUARE1,
       "def sum_of_squares(numbers):\n    return sum(aux(x) for x in numbers)",
       "candidate([]) == 0", "candidate([-2]) == 4", "candidate([0, 5]) == 25", "candidate([1, 1, 1]) == 3"),
    _p("even", "evens", "(numbers: list) -> list",
       "Return the even numbers of `numbers`, in order.",
       ("evens([1, 2, 3, 4])", "[2, 4]"), EVEN,
       "def evens(numbers):\n    return [n for n in numbers if aux(n)]",
       "candidate([]) == []", "candidate([1, 3]) == []", "candidate([0, -2, 5]) == [0, -2]",
       "candidate([6, 7, 8]) == [6, 8]"),
    _p("even", "count_evens", "(numbers: list) -> int",
       "Return how many numbers in `numbers` are even.",
       ("count_evens([1, 2, 3, 4])", "2"), EVEN,
       "def count_evens(numbers):\n    return sum(1 for n in numbers if aux(n))",
       "candidate([]) == 0", "candidate([1, 3]) == 0", "candidate([0, -2, 5]) == 2", "candidate([8]) == 1"),
    _p("positive", "positives", "(numbers: list) -> list",
       "Return the numbers of `numbers` that are greater than zero, in order.",
       ("positives([-1, 2, 0, 3])", "[2, 3]"), POSITIVE,
       "def positives(numbers):\n    return [n for n in numbers if aux(n)]",
       "candidate([]) == []", "candidate([0, -5]) == []", "candidate([7]) == [7]", "candidate([1, -1, 2]) == [1, 2]"),
    _p("positive", "count_positives", "(numbers: list) -> int",
       "Return how many numbers in `numbers` are greater than zero.",
       ("count_positives([-1, 2, 0, 3])", "2"), POSITIVE,
       "def count_positives(numbers):\n    return sum(1 for n in numbers if aux(n))",
       "candidate([]) == 0", "candidate([0, -5]) == 0", "candidate([7]) == 1", "candidate([1, -1, 2]) == 2"),
    _p("upper", "shout_words", "(words: list) -> list",
       "Return each word of `words` in capital letters.",
       ("shout_words(['hi', 'there'])", "['HI', 'THERE']"), UPPER,
       "def shout_words(words):\n    return [aux(w) for w in words]",
       "candidate([]) == []", "candidate(['a']) == ['A']", "candidate(['Hello', 'WORLD']) == ['HELLO', 'WORLD']",
       "candidate(['x1']) == ['X1']"),
    _p("upper", "shout_sentence", "(sentence: str) -> str",
       "Return `sentence` with every word in capital letters, the words joined by single spaces.",
       ("shout_sentence('hi there')", "'HI THERE'"), UPPER,
       "def shout_sentence(sentence):\n    return ' '.join(aux(w) for w in sentence.split())",
       "candidate('') == ''", "candidate('a') == 'A'", "candidate('Hello  world') == 'HELLO WORLD'",
       "candidate('x y z') == 'X Y Z'"),
    _p("reverse", "reverse_all", "(words: list) -> list",
       "Return each string of `words` written backwards.",
       ("reverse_all(['abc', 'xy'])", "['cba', 'yx']"), REVERSE,
       "def reverse_all(words):\n    return [aux(w) for w in words]",
       "candidate([]) == []", "candidate(['a']) == ['a']", "candidate(['hello']) == ['olleh']",
       "candidate(['ab', '']) == ['ba', '']"),
    _p("reverse", "reverse_each_word", "(sentence: str) -> str",
       "Return `sentence` with each word written backwards, the words kept in order and joined by single spaces.",
       ("reverse_each_word('abc xy')", "'cba yx'"), REVERSE,
       "def reverse_each_word(sentence):\n    return ' '.join(aux(w) for w in sentence.split())",
       "candidate('') == ''", "candidate('a') == 'a'", "candidate('hello world') == 'olleh dlrow'",
       "candidate('ab cd ef') == 'ba dc fe'"),
    _p("length", "word_lengths", "(words: list) -> list",
       "Return the number of characters of each string in `words`.",
       ("word_lengths(['hi', 'there'])", "[2, 5]"), LENGTH,
       "def word_lengths(words):\n    return [aux(w) for w in words]",
       "candidate([]) == []", "candidate(['']) == [0]", "candidate(['abc', 'a']) == [3, 1]",
       "candidate(['hello']) == [5]"),
    _p("length", "total_length", "(words: list) -> int",
       "Return the total number of characters of the strings in `words`.",
       ("total_length(['hi', 'there'])", "7"), LENGTH,
       "def total_length(words):\n    return sum(aux(w) for w in words)",
       "candidate([]) == 0", "candidate(['']) == 0", "candidate(['abc', 'a']) == 4", "candidate(['hello']) == 5"),
    _p("first_letter", "initials", "(words: list) -> list",
       "Return the first character of each non-empty string in `words`.",
       ("initials(['big', 'red', 'dog'])", "['b', 'r', 'd']"), FIRST,
       "def initials(words):\n    return [aux(w) for w in words]",
       "candidate([]) == []", "candidate(['a']) == ['a']", "candidate(['Hello', 'World']) == ['H', 'W']",
       "candidate(['xyz', 'abc']) == ['x', 'a']"),
    _p("first_letter", "initials_string", "(words: list) -> str",
       "Return the first characters of the non-empty strings in `words`, joined into one string.",
       ("initials_string(['big', 'red', 'dog'])", "'brd'"), FIRST,
       "def initials_string(words):\n    return ''.join(aux(w) for w in words)",
       "candidate([]) == ''", "candidate(['a']) == 'a'", "candidate(['Hello', 'World']) == 'HW'",
       "candidate(['xyz', 'abc', 'q']) == 'xaq'"),
    _p("double", "doubled", "(numbers: list) -> list",
       "Return each number of `numbers` multiplied by 2.",
       ("doubled([1, 2, 3])", "[2, 4, 6]"), DOUBLE,
       "def doubled(numbers):\n    return [aux(x) for x in numbers]",
       "candidate([]) == []", "candidate([-4]) == [-8]", "candidate([0, 5]) == [0, 10]", "candidate([7]) == [14]"),
    _p("double", "sum_doubled", "(numbers: list) -> int",
       "Return the sum of the numbers of `numbers`, each multiplied by 2.",
       ("sum_doubled([1, 2, 3])", "12"), DOUBLE,
       "def sum_doubled(numbers):\n    return sum(aux(x) for x in numbers)",
       "candidate([]) == 0", "candidate([-4]) == -8", "candidate([0, 5]) == 10", "candidate([1, 1]) == 4"),
    _p("vowel_char", "count_vowels", "(text: str) -> int",
       "Return how many characters of `text` are vowels (a, e, i, o, u, in either case).",
       ("count_vowels('banana')", "3"), IS_VOWEL,
       "def count_vowels(text):\n    return sum(1 for c in text if aux(c))",
       "candidate('') == 0", "candidate('xyz') == 0", "candidate('AEIOU') == 5", "candidate('Hello World') == 3"),
    _p("vowel_char", "strip_vowels", "(text: str) -> str",
       "Return `text` without its vowels (a, e, i, o, u, in either case).",
       ("strip_vowels('banana')", "'bnn'"), IS_VOWEL,
       "def strip_vowels(text):\n    return ''.join(c for c in text if not aux(c))",
       "candidate('') == ''", "candidate('xyz') == 'xyz'", "candidate('AEIOU') == ''",
       "candidate('Hello World') == 'Hll Wrld'"),
    _p("last_digit", "last_digits", "(numbers: list) -> list",
       "Return the last decimal digit of each integer in `numbers` (the sign is ignored).",
       ("last_digits([12, 305])", "[2, 5]"), LAST_DIGIT,
       "def last_digits(numbers):\n    return [aux(n) for n in numbers]",
       "candidate([]) == []", "candidate([0]) == [0]", "candidate([-47]) == [7]", "candidate([10, 99]) == [0, 9]"),
    _p("last_digit", "sum_of_last_digits", "(numbers: list) -> int",
       "Return the sum of the last decimal digits of the integers in `numbers` (the sign is ignored).",
       ("sum_of_last_digits([12, 305])", "7"), LAST_DIGIT,
       "def sum_of_last_digits(numbers):\n    return sum(aux(n) for n in numbers)",
       "candidate([]) == 0", "candidate([0]) == 0", "candidate([-47]) == 7", "candidate([10, 99, 1]) == 10"),
    _p("cube", "cubes", "(numbers: list) -> list",
       "Return the cube of each number in `numbers`.",
       ("cubes([1, 2, 3])", "[1, 8, 27]"), CUBE,
       "def cubes(numbers):\n    return [aux(x) for x in numbers]",
       "candidate([]) == []", "candidate([-2]) == [-8]", "candidate([0, 4]) == [0, 64]", "candidate([10]) == [1000]"),
    _p("cube", "sum_of_cubes", "(numbers: list) -> int",
       "Return the sum of the cubes of the numbers in `numbers`.",
       ("sum_of_cubes([1, 2])", "9"), CUBE,
       "def sum_of_cubes(numbers):\n    return sum(aux(x) for x in numbers)",
       "candidate([]) == 0", "candidate([-2]) == -8", "candidate([0, 4]) == 64", "candidate([1, 1, 1]) == 3"),
    _p("fahrenheit", "to_fahrenheit", "(celsius: list) -> list",
       "Convert each Celsius temperature in `celsius` to Fahrenheit (F = C * 9 / 5 + 32).",
       ("to_fahrenheit([0, 100])", "[32.0, 212.0]"), C_TO_F,
       "def to_fahrenheit(celsius):\n    return [aux(c) for c in celsius]",
       "candidate([]) == []", "candidate([-40]) == [-40.0]", "candidate([10, 20]) == [50.0, 68.0]",
       "candidate([5]) == [41.0]"),
    _p("fahrenheit", "warmest_fahrenheit", "(celsius: list) -> float",
       "Return the highest of the Celsius temperatures `celsius` in Fahrenheit (F = C * 9 / 5 + 32).",
       ("warmest_fahrenheit([0, 100])", "212.0"), C_TO_F,
       "def warmest_fahrenheit(celsius):\n    return max(aux(c) for c in celsius)",
       "candidate([0]) == 32.0", "candidate([-40, -50]) == -40.0", "candidate([10, 20, 15]) == 68.0",
       "candidate([5]) == 41.0"),
)
"""Every problem, in a fixed order (`task_id` is `TeamCoding/<index>`): the 62 problems of level 2 (a helper of a
few lines, a main with a loop or an aggregate), then the 24 of level 1 (a one-line helper and a one-line main), which
a 135M-parameter model can already solve now and then."""

FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(p.family for p in TEAM_CODING_PROBLEMS))
"""The families in the order they are written."""

HELDOUT_FAMILIES: tuple[str, ...] = FAMILIES[2::3]
"""The held-out families: every third family in the order written, from the third. The rule was fixed with the
problems, before any model was run on them; never tune anything on these problems."""


def team_coding_split() -> tuple[list[int], list[int]]:
    """Indices of the training and the held-out problems in [`TEAM_CODING_PROBLEMS`] (split by family)."""
    train = [i for i, p in enumerate(TEAM_CODING_PROBLEMS) if p.family not in HELDOUT_FAMILIES]
    held = [i for i, p in enumerate(TEAM_CODING_PROBLEMS) if p.family in HELDOUT_FAMILIES]
    return train, held


def team_coding_rows(split: str = "train", levels: tuple[int, ...] = (1, 2)) -> list[dict[str, Any]]:
    """The problems of `split` (`"train"`, `"heldout"` or `"all"`) and `levels` as rows of HumanEval's schema (plus
    `family`, `level`, `helper_solution`, `helper_signature` and `helper_doc`)."""
    train, held = team_coding_split()
    chosen = {"train": train, "heldout": held, "all": train + held}
    if split not in chosen:
        raise ValueError(f"split must be 'train', 'heldout' or 'all', got {split!r}.")
    bad = [level for level in levels if level not in (1, 2)]
    if bad or not levels:
        raise ValueError(f"levels must be a non-empty tuple of 1 and/or 2, got {levels!r}.")
    return [TEAM_CODING_PROBLEMS[i].row(i) for i in sorted(chosen[split]) if TEAM_CODING_PROBLEMS[i].level in levels]


def load_team_coding(split: str = "train", levels: tuple[int, ...] = (1, 2)) -> datasets.Dataset:
    """The cooperative coding problems of `split` as a `datasets.Dataset` for
    [`~trl_marl.envs.coding.CooperativeCodingEnv`] (see the module docstring).

    Args:
        split (`str`): `"train"`, `"heldout"` or `"all"`.
        levels (`tuple[int, ...]`): Which levels: 1 (one-line helper and main) and/or 2 (a few lines each).

    Returns:
        `datasets.Dataset`
    """
    import datasets

    return datasets.Dataset.from_list(team_coding_rows(split, tuple(levels)))


# ------------------------------------------------------------------------------------------ division of labour
HELPER_TESTS: dict[str, tuple[str, ...]] = {
    "square": ("aux(3) == 9", "aux(-4) == 16", "aux(0) == 0"),
    "even": ("aux(4) is True", "aux(7) is False", "aux(0) is True", "aux(-3) is False"),
    "positive": ("aux(5) is True", "aux(0) is False", "aux(-2) is False"),
    "upper": ("aux('abc') == 'ABC'", "aux('Hi') == 'HI'", "aux('') == ''"),
    "reverse": ("aux('abc') == 'cba'", "aux('') == ''", "aux('ab c') == 'c ba'"),
    "length": ("aux('abc') == 3", "aux('') == 0", "aux('a b') == 3"),
    "first_letter": ("aux('cat') == 'c'", "aux('Zoo') == 'Z'", "aux('x') == 'x'"),
    "double": ("aux(3) == 6", "aux(-5) == -10", "aux(0) == 0"),
    "vowel_char": ("aux('a') is True", "aux('E') is True", "aux('b') is False", "aux('y') is False"),
    "last_digit": ("aux(123) == 3", "aux(-47) == 7", "aux(0) == 0"),
    "cube": ("aux(2) == 8", "aux(-3) == -27", "aux(0) == 0"),
    "fahrenheit": ("aux(0) == 32.0", "aux(100) == 212.0", "aux(-40) == -40.0"),
}
"""Hidden asserts on the helper `aux` itself, per level-1 family: in the division-of-labour task
([`division_coding_rows`]) the program must define both functions, so the tests check both."""


def division_coding_rows(split: str = "train") -> list[dict[str, Any]]:
    """The level-1 problems of `split` for [`~trl_marl.envs.coding_division.DivisionCodingEnv`]: the same rows as
    `team_coding_rows(split, (1,))`, whose `test` also asserts on `aux` ([`HELPER_TESTS`]), so that a program passes
    only when both functions are there and right. The split is the one of [`team_coding_split`] (by family)."""
    rows = team_coding_rows(split, (1,))
    for row in rows:
        extra = "".join(f"    assert {t}\n" for t in HELPER_TESTS[row["family"]])
        row["test"] = row["test"] + extra
    return rows


# ------------------------------------------------------------------------------------------ private rules
RULE_FORMS: tuple[tuple[str, str, Callable[[int, int, int], int]], ...] = (
    ("multiply `x` by {k}, then add {c}", "x * {k} + {c}", lambda x, k, c: x * k + c),
    ("multiply `x` by {k}, then subtract {c}", "x * {k} - {c}", lambda x, k, c: x * k - c),
    ("add {c} to `x`, then multiply by {k}", "(x + {c}) * {k}", lambda x, k, c: (x + c) * k),
    ("square `x`, then add {c}", "x * x + {c}", lambda x, k, c: x * x + c),
    ("multiply `x` by {k}, then take the remainder after dividing by {c}", "x * {k} % {c}",
     lambda x, k, c: x * k % c),
)
"""The forms of a private rule: its words (what the helper agent reads), its expression, and its value. Forms 0-2
make the `"linear"` rule set, forms 0 and 2-4 the `"mixed"` one (square has no multiplier: `k` is 0)."""

HELDOUT_RULE_FORM = 2
"""The index in [`RULE_FORMS`] of the form that only held-out rows use (add, then multiply)."""
HELDOUT_MULTIPLIERS = (4, 9)
"""Multipliers k that only held-out rows use (with any form)."""
HELDOUT_RULES: tuple[tuple[int, int, int], ...] = ((2, 3, 2), (2, 5, 1), (2, 7, 3), (2, 2, 6), (0, 4, 3), (1, 9, 2),
                                                   (0, 9, 5), (1, 4, 7))
"""The held-out rules (form, k, c), fixed before any model ran: the held-out form with four (k, c), and each
held-out multiplier with the two other forms."""

MIXED_TRAIN_FORMS = (0, 3, 4)
"""The forms of the `"mixed"` rule set's training rows: multiply-then-add (the untrained SmolLM2-135M helper wrote it
right in 0.85 of 48 answers, T = 0.7, a probe on training-style rules), square-then-add (0.0 and 0.25 in two probes)
and multiply-then-remainder (0.33): a helper that is right about half the time, with room to learn."""
MIXED_HELDOUT_RULES: tuple[tuple[int, int, int], ...] = ((2, 3, 2), (2, 5, 1), (0, 4, 3), (0, 9, 5), (3, 0, 4),
                                                         (3, 0, 9), (4, 4, 7), (4, 9, 5))
"""The `"mixed"` set's held-out rules (form, k, c), fixed before any pilot: two of the held-out form (add, then
multiply), and each training form with a held-out multiplier (4, 9) or, for square, a held-out constant (4, 9)."""


def _training_rules(rules: str) -> list[tuple[int, int, int]]:
    """The training rules (form, k, c) of a rule set (see [`private_rule_rows`])."""
    ks = [k for k in range(2, 10) if k not in HELDOUT_MULTIPLIERS]
    if rules == "linear":
        return [(f, k, c) for f in (0, 1) for k in ks for c in range(1, 10)]
    return ([(0, k, c) for k in ks for c in range(1, 10)]
            + [(3, 0, c) for c in range(1, 10) if c not in HELDOUT_MULTIPLIERS]
            + [(4, k, c) for k in ks for c in range(2, 10) if k % c])  # k % c == 0 would code every number as 0


RuleShape = tuple[str, str, str, str, Callable[[Callable[[int], int], Any], Any], tuple[Any, ...]]

RULE_SHAPES: tuple[RuleShape, ...] = (
    ("coded_list", "(numbers: list) -> list", "Return the code of each number in `numbers`, in order.",
     "[aux(x) for x in numbers]", lambda aux, xs: [aux(x) for x in xs], ([], [1, 2], [0], [5, -1, 3])),
    ("coded_sum", "(numbers: list) -> int", "Return the sum of the codes of the numbers in `numbers`.",
     "sum(aux(x) for x in numbers)", lambda aux, xs: sum(aux(x) for x in xs), ([], [1, 2], [0], [5, -1, 3])),
    ("largest_code", "(numbers: list) -> int", "Return the largest code of the numbers in `numbers` (never empty).",
     "max(aux(x) for x in numbers)", lambda aux, xs: max(aux(x) for x in xs), ([1, 2], [0], [5, -1, 3], [-4, -7])),
    ("coded_pair", "(a: int, b: int) -> int", "Return the code of `a` plus the code of `b`.",
     "aux(a) + aux(b)", lambda aux, ab: aux(ab[0]) + aux(ab[1]), ((1, 2), (0, 0), (5, -3), (10, 7))),
)
"""The main functions over a private rule: name, signature, description, reference body, reference value (from the
rule and the arguments) and the test arguments (a list, or the pair of `coded_pair`)."""


def private_rule_rows(split: str = "train", rules: str = "linear") -> list[dict[str, Any]]:
    """Cooperative coding with private information ([`~trl_marl.envs.coding.PrivateRuleCodingEnv`], issue 55): only
    the helper agent reads the rule that codes a number ("multiply `x` by 3, then add 4"); the main agent must call the
    helper to compute anything over the codes (a list of codes, their sum, the largest, the codes of two numbers).

    Rows are in HumanEval's schema plus `rule` (the words the helper reads), `helper_signature`, `helper_doc` (the
    rule: for the helper agent only), `helper_solution`, `family` (the rule's form) and `level` (1). The split holds
    out a whole form of rule (add, then multiply) and the multipliers 4 and 9 ([`HELDOUT_RULES`]), fixed before any
    model ran: a team that scores on held-out rows implements and uses rules it never trained on. Training rows:
    2 forms x 6 multipliers x 9 constants x 4 shapes = 432; held-out rows: 16 (each held-out rule with two shapes).

    The `"mixed"` rule set (issue 55's seventh design) trains on rules the untrained helper often gets wrong:
    multiply-then-add, square-then-add and multiply-then-remainder ([`MIXED_TRAIN_FORMS`]; 54 + 7 + 38 rules, 396
    rows, the family in each row's `family`), and holds out [`MIXED_HELDOUT_RULES`] (16 rows).

    Args:
        split (`str`): `"train"` or `"heldout"`.
        rules (`str`): The rule set, `"linear"` (the default, the first design) or `"mixed"`.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}.")
    if rules not in ("linear", "mixed"):
        raise ValueError(f"rules must be 'linear' or 'mixed', got {rules!r}.")
    if split == "train":
        chosen = _training_rules(rules)
    else:
        chosen = list(HELDOUT_RULES if rules == "linear" else MIXED_HELDOUT_RULES)
    rows: list[dict[str, Any]] = []
    for index, (f, k, c) in enumerate(chosen):
        words, expression, value = RULE_FORMS[f]
        words, expression = words.format(k=k, c=c), expression.format(k=k, c=c)

        def aux(x: int, value: Callable[[int, int, int], int] = value, k: int = k, c: int = c) -> int:
            return value(x, k, c)

        for shape, (name, signature, doc, body, reference, args) in enumerate(RULE_SHAPES):
            if split == "heldout" and shape % 2 != index % 2:
                continue  # each held-out rule with two of the four shapes
            params = signature.split(" ->")[0]
            calls = [f"candidate({', '.join(map(repr, a))})" if name == "coded_pair" else f"candidate({a!r})"
                     for a in args]
            tests = [f"{call} == {reference(aux, a)!r}" for call, a in zip(calls, args)]
            helper = f"def aux(x):\n    return {expression}"
            main = f"def {name}{params}:\n    return {body}"
            rows.append({
                "task_id": f"PrivateRule/{split}/{len(rows)}", "prompt": f'def {name}{signature}:\n    """{doc}"""\n',
                "entry_point": name, "test": "def check(candidate):\n" + "".join(f"    assert {t}\n" for t in tests),
                "canonical_solution": f"{helper}\n\n\n{main}\n", "helper_solution": helper,
                "helper_signature": "(x: int) -> int", "helper_doc": f"Return the code of `x`: {words}.",
                "rule": words, "family": RULE_FORMS[f][1].format(k="k", c="c"), "level": 1,
            })
    return rows


PAIR_TEST_ARGUMENTS = (0, 1, 2, 5, -3)
"""The numbers `x` at which the rule-pair rows test `two_codes(x)` (each function separately)."""


def rule_pair_rows(split: str = "train", count: int = 160) -> list[dict[str, Any]]:
    """Two rules, two helper functions, two programmers who choose who writes which
    ([`~trl_marl.envs.coding_rule_division.RuleDivisionCodingEnv`], issue 55's ninth design).

    Each row names two different rules of the first private-rule set ([`RULE_FORMS`] 0 and 1 for training, the
    held-out rules [`HELDOUT_RULES`] for held-out rows): `aux1(x)` codes `x` by the first, `aux2(x)` by the second.
    The row's prompt is the whole main function `two_codes(x)`, which returns `[aux1(x), aux2(x)]`; its tests check
    each function separately at [`PAIR_TEST_ARGUMENTS`], so a program with one right function passes half of them and
    a program that misses one function passes none. Columns: HumanEval's, plus `rule1`, `rule2` (the rules' words) and
    `level` (1).

    Args:
        split (`str`): `"train"` (`count` pairs of training rules, drawn with a fixed seed) or `"heldout"` (16 pairs
            of held-out rules: each rule with the next and the third next one).
        count (`int`): The number of training rows.
    """
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}.")
    if split == "train":
        rules = _training_rules("linear")
        rng = random.Random(55)
        pairs = [tuple(rng.sample(rules, 2)) for _ in range(count)]
    else:
        n = len(HELDOUT_RULES)
        pairs = [(HELDOUT_RULES[i], HELDOUT_RULES[(i + step) % n]) for step in (1, 3) for i in range(n)]
    prompt = ('def two_codes(x: int) -> list:\n    """Return the code of `x` under the first rule and under the '
              'second rule."""\n    return [aux1(x), aux2(x)]\n')
    rows: list[dict[str, Any]] = []
    for index, pair in enumerate(pairs):
        words, helpers, tests = [], [], []
        for slot, (f, k, c) in enumerate(pair):
            text, expression, value = RULE_FORMS[f]
            words.append(text.format(k=k, c=c))
            helpers.append(f"def aux{slot + 1}(x):\n    return {expression.format(k=k, c=c)}")
            tests += [f"candidate({x})[{slot}] == {value(x, k, c)!r}" for x in PAIR_TEST_ARGUMENTS]
        rows.append({
            "task_id": f"RulePair/{split}/{index}", "prompt": prompt, "entry_point": "two_codes",
            "test": "def check(candidate):\n" + "".join(f"    assert {t}\n" for t in tests),
            "canonical_solution": "\n\n\n".join(helpers) + "\n\n\n" + prompt, "rule1": words[0], "rule2": words[1],
            "level": 1,
        })
    return rows
