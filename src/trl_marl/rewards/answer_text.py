"""The pieces of a response that the answer rules of `trl_marl.rewards.answers` read: the tail that is read at all,
the boxes and what stands beside them, LaTeX markup, sentences and the qualifiers in them, and retractions. The rules
themselves (what is a statement, a hedge, an ambiguous answer) are in `trl_marl.rewards.answers`; every function here
is linear in the length of its text.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from array import array
from fractions import Fraction

from ..utils.numbers import MAX_DIGITS, neutral_before

__all__ = [
    "MAX_RESPONSE_CHARS",
    "QUALIFIER",
    "RETRACTION",
    "Sentences",
    "box_touches_operator",
    "find_boxes",
    "mask_boxes",
    "response_tail",
    "strip_latex",
]

MAX_RESPONSE_CHARS = 32_768
"""The most characters of a response the extraction reads: its last ones (see [`response_tail`]). About 8,000 tokens:
more than a completion's usual `max_completion_length`, and the final answer is at the end. The work of every rule is
linear in what is read, so a response of megabytes costs what one of this length does."""


# Every command that draws a box or a coloured background around its last argument: each is a final-answer statement,
# so a `\\framebox{6}` or `\\colorbox{yellow}{6}` beside `\\boxed{5}` is a second, competing one. Their optional and
# colour arguments are skipped (each at most 40 characters, so the match is linear in the text).
_OPTION = r"(?:\s*\[[^\]\n]{0,40}\])"
_COLOUR = r"(?:\s*(?:\[[^\]\n]{0,40}\])?\s*\{[^{}\n]{0,40}\})"
_BOXED = re.compile(
    rf"\\(?:boxed|fbox|framebox{_OPTION}{{0,2}}|ovalbox|Ovalbox|doublebox|shadowbox"
    rf"|fcolorbox{_COLOUR}{_COLOUR}|colorbox{_COLOUR}|bbox{_OPTION}?|tcbox(?:math)?{_OPTION}?)(?![a-zA-Z])\s*"
)
BOX_COMMANDS = frozenset(
    "boxed fbox framebox ovalbox Ovalbox doublebox shadowbox fcolorbox colorbox bbox tcbox tcboxmath".split()
)
"""The LaTeX commands read as boxes (a final-answer statement each): every command of LaTeX, `fancybox`, `tcolorbox`
and MathJax that frames its argument or colours its background."""
_BRACE = re.compile(r"[{}]")
_BOX_TOKEN = re.compile(r"[^\s$\\{}]+")  # `\boxed 5`: up to a space, `$`, a brace or the next command
# Where a sentence ends: its punctuation, a blank line, or a line that starts a Markdown block (a heading such as
# GSM8K's "####", a list item, a quotation, a table row). A single line break does not end a sentence: Markdown
# joins the lines, and "The answer is not\n\\boxed{5}" is one sentence.
# The period of an abbreviation of "approximately", "circa", "estimated" or "about" ends no sentence: "The answer is
# approx. 5." is one sentence, which holds its qualifier.
_ABBREVIATIONS = ("approx", "aprox", "appr", "appx", "apprx", "ca", "circa", "est", "estd", "abt")
_PERIOD = "".join(rf"(?<!\b{word})" for word in _ABBREVIATIONS) + r"\."
SENTENCE_END = rf"(?:{_PERIOD}|[?;])(?=\s|$)|(?<![0-9])!(?=\s|$)"
"""Where a sentence ends within a line: `.` (not after an abbreviation such as `approx`), `?` or `;` before a space
or the end, and `!` unless it is a factorial (`5!`); `2.5` holds no end. A regular expression (a string), to be
compiled case-insensitively."""
_BOUNDARY = re.compile(rf"{SENTENCE_END}|\n[ \t]*\n|\n(?=[ \t]*(?:#|\u2022|[0-9]+[.)][ \t]|>|\|))", re.IGNORECASE)
_LATEX_FRAC = re.compile(
    r"\\(?:[dtc]?frac|sfrac|nicefrac)\s*(?:\[[a-z]\]\s*)?"
    r"(?P<a>\{[^{}]*\}|[0-9a-zA-Z]|\\[a-zA-Z]+)\s*(?P<b>\{[^{}]*\}|[0-9a-zA-Z]|\\[a-zA-Z]+)"
)
_SIMPLE_ARGUMENT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]+)?|[a-zA-Z])")
_LATEX_TEXT = re.compile(
    r"\\(?:text|textbf|mathrm|mathbf|textit|mbox|operatorname|boxed|fbox|framebox|ovalbox|Ovalbox|doublebox|shadowbox"
    r"|colorbox\s*\{[^{}]*\}|fcolorbox\s*\{[^{}]*\}\s*\{[^{}]*\})\s*\{([^{}]*)\}"
)
_LATEX_SPACE = re.compile(r"\\(?:[,;: ]|quad|qquad|enspace|thinspace)(?![a-zA-Z])")
_LATEX_DROP = re.compile(r"\\(?:left|right|displaystyle|!)|\^\s*\{?\\circ\}?|\^\\circ")
# Words that make the sentence of an answer something other than a plain statement of it: a negation ("not", "no",
# "cannot", "isn't", "5 is not the answer"), a bound ("at least", "or more", "up to", "more than", "over 5"), an
# approximation ("about", "roughly", "nearly"), a hedge ("maybe", "probably", "my guess"), or a judgement ("wrong").
_APOSTROPHE = "['\u2019\u02bc]"  # typewriter, right single quotation mark, modifier letter apostrophe
_NUMBER_WORD = (
    r"(?:zero|nought|naught|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen"
    r"|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|half)\b"
)
_NUMERAL_AHEAD = rf"(?=[ \t]+(?:[-$.(]?[0-9]|{_NUMBER_WORD}))"  # a number (digits or words) follows
QUALIFIER = re.compile(
    r"\b(?:not|no|never|neither|nor|none|cannot|without|except|excluding|unless|otherwise|instead|rather"
    r"|about|approx(?:imately)?|aprox|appr|appx|apprx|roughly|around|nearly|almost|circa"
    r"|ca(?=\.|[ \t]+[0-9])|abt|est(?=\.)|close[ \t]+to|estimated?|estimates?|estd"
    r"|maybe|perhaps|probably|possibly|likely|unlikely|guess|false|wrong|incorrect"
    r"|(?:might|may|could)(?:[ \t]+(?:well|also|just|possibly|even))?[ \t]+be"
    r"|presumably|supposedly|allegedly|conceivably|potentially|seemingly|apparently"
    r"|impossible|improbable|implausible|unsure|uncertain|doubt(?:ful|s)?|questionable|unclear"
    r"|hardly|barely|scarcely|anything[ \t]+but|all[ \t]+but|far[ \t]+from|nowhere[ \t]+near"
    r"|upwards?[ \t]+of|in[ \t]+excess[ \t]+of|north[ \t]+of|south[ \t]+of|(?:shy|short)[ \t]+of"
    r"|give[ \t]+or[ \t]+take|plus[ \t]+or[ \t]+minus"
    r"|(?:at|up)[ \t]+(?:least|most|to)|(?:more|less|fewer|greater|smaller|larger|bigger|higher|lower|other)[ \t]+than"
    r"|or[ \t]+(?:more|less|fewer|greater|higher|lower|above|below|so|thereabouts|over|under|earlier|later)"
    r"|and[ \t]+(?:up|above|over|more)|(?:over|under|above|below|beyond|near|exceeding)(?=[ \t]+[-$.]?[0-9])"
    rf"|between{_NUMERAL_AHEAD}"
    rf"|minimum|maximum)\b|n{_APOSTROPHE}t\b|(?<=[0-9])-?ish\b|(?<=[0-9]-)odd\b",
    re.IGNORECASE,
)
# A retraction: what came before it is withdrawn ("The answer is 5.\n\nWait, that's wrong: it is 6." is 6; "The
# answer is 5. Just kidding." is no answer). Most cues start a clause (at the start of the text or after anything but
# a word: a sentence mark, a comma, a bracket, a box, a line break; not "a wait of 5 minutes"), possibly after an
# interjection or a conjunction ("But that's not right.", "Oh, that can't be right."); some retract wherever they
# stand ("never mind", "just kidding", "whoops", "I take that back", "... is not the answer", "... is wrong").
_IS = rf"(?:{_APOSTROPHE}s|[ \t]+is|[ \t]+was)"
_IS_NOT = rf"(?:{_APOSTROPHE}s[ \t]+not|[ \t]+(?:is|was)[ \t]+not|[ \t]+(?:is|was)n{_APOSTROPHE}t)"
_THAT = r"(?:that|this|it|which)"
_RETRACTION_CUE = (
    r"wait|actually|oops|correction|scratch[ \t]+that"
    r"|on[ \t]+(?:second|further)[ \t]+thought|on[ \t]+reflection|hold[ \t]+on|no(?=[ \t]*[,.!]|[ \t]+wait)|nope"
    r"|sorry|my[ \t]+(?:mistake|bad|error)"
    rf"|I(?:[ \t]+was|[ \t]+am|{_APOSTROPHE}m)[ \t]+wrong|I[ \t]+made[ \t]+(?:a|an)[ \t]+(?:mistake|error)"
    rf"|let(?:[ \t]+me|{_APOSTROPHE}s|[ \t]+us)[ \t]+"
    r"(?:re-?(?:check|consider|compute|calculate|do|evaluate|think|examine)|redo|correct)"
    rf"|{_THAT}{_IS}[ \t]+(?:wrong|incorrect|not[ \t]+(?:right|correct|it)|a[ \t]+mistake|an[ \t]+error)"
    rf"|{_THAT}{_IS_NOT}[ \t]+(?:right|correct|it)"
    rf"|{_THAT}[ \t]+(?:can(?:not|{_APOSTROPHE}t|[ \t]+not)|could(?:[ \t]+not|n{_APOSTROPHE}t))"
    r"[ \t]+be[ \t]+(?:right|correct)"
    rf"|{_THAT}[ \t]+(?:does|did)(?:[ \t]+not|n{_APOSTROPHE}t)[ \t]+(?:seem|look|sound)[ \t]+(?:right|correct)"
)
# Cues that retract wherever they stand, even right after the answer on its line ("#### 5 Just kidding").
_RETRACTION_ANYWHERE = (
    r"whoops|woops|uh[ \t-]*oh|strike[ \t]+that|(?:just[ \t]+)?(?:kidding|joking)|never[ \t]*mind|nvm"
    r"|forget[ \t]+(?:it|that|the[ \t]+above|what[ \t]+I[ \t]+(?:said|wrote))"
    r"|(?:disregard|ignore)[ \t]+(?:that|this|the[ \t]+above|(?:what|everything)[ \t]+I[ \t]+(?:said|wrote))"
    r"|I[ \t]+take[ \t]+(?:that|it)[ \t]+back|I[ \t]+retract"
)
_INTERJECTION = r"(?:(?:but|and|so|oh|ah|hmm+|h?mm+|well|um+|uh|ok(?:ay)?)\b[ \t,.!]*)?"
RETRACTION = re.compile(
    r"(?:^|[^\w \t*])[ \t*_]*"  # no "*" at the start: a run of them is skipped once, in linear time
    + _INTERJECTION
    + rf"(?:{_RETRACTION_CUE})\b"
    rf"|\b(?:{_RETRACTION_ANYWHERE})\b"
    rf"|\b(?:is|was|are)(?:[ \t]+not|n{_APOSTROPHE}t)[ \t]+(?:the|my|our|a)[ \t]+"
    r"(?:final[ \t]+|correct[ \t]+|right[ \t]+)?answer\b"
    rf"|\b(?:is|was|are|{_APOSTROPHE}s)[ \t]+(?:wrong|incorrect)\b",
    re.IGNORECASE | re.MULTILINE,
)
# Next to a box, these make its value something else (`-\boxed{5}`, `2\boxed{5}`, `\boxed{5}^2`, `\boxed{5}!`,
# `\boxed{5} \cdot 2`): the box is ambiguous. LaTeX commands beside a box are refused unless they only format.
# Another box beside a box is a statement of its own, read as such.
_FORMATTING_COMMANDS = BOX_COMMANDS | frozenset(
    "text textrm textbf textit mathrm mathbf mbox quad qquad enspace hfill hspace displaystyle left right big Big "
    "bigl bigr Bigl Bigr end begin label tag newline".split()
)
# Conclusions before a box end the look back: what comes before them is reasoning ("2 + 3 \\Rightarrow \\boxed{5}").
_CONCLUSIONS = frozenset("therefore implies Rightarrow rightarrow Longrightarrow longrightarrow to iff".split())
_BOX_SKIP = frozenset(" \t\n$")
_COMMAND = re.compile(r"\\([a-zA-Z]+|.)", re.DOTALL)
_OPERAND_AFTER_SIGN = re.compile(r"[+-][ \t]*(?:[0-9({\[\\$]|\.[0-9]|[a-zA-Z](?![a-zA-Z]))")
_LOOK = 64  # at most this many characters are skipped beside a box (spaces, `$`, brackets, formatting)


def response_tail(text: str, max_chars: int = MAX_RESPONSE_CHARS) -> str:
    """The part of a response that the extraction reads: all of it, or its last `max_chars` characters.

    A longer response is cut before its last `max_chars` characters and read from the first line after the cut (or,
    in a tail without a line break, from the first character after a space), so that no number, word or command is
    read in half (`"...12345"` cut inside the number is not `"345"`). A tail without any space holds no answer.

    Args:
        text: The response.
        max_chars: The most characters read.

    Returns:
        The text that is read.

    Raises:
        ValueError: If `max_chars` is not a positive integer.
    """
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 1:
        raise ValueError(
            f"`max_chars` / `max_response_chars` (the most characters of a response that are read) must "
            f"be a positive integer, got {max_chars!r}; the default is MAX_RESPONSE_CHARS = "
            f"{MAX_RESPONSE_CHARS}."
        )
    if len(text) <= max_chars:
        return text
    tail = text[len(text) - max_chars :]
    start = tail.find("\n")
    if start < 0:
        space = re.search(r"\s", tail)
        if space is None:
            return ""
        start = space.start()
    return tail[start + 1 :]


def find_boxes(text: str) -> list[tuple[int, int, int, int]]:
    """The complete outermost `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) of a text, in order, as `(start,
    content start, content end, end)`.

    Braces are matched in one pass over the text, a box inside another box is part of the outer one, and `\\boxed 5`
    takes the token up to the next space, `$`, brace or backslash: the boxes are disjoint, so the time is linear in
    the length of the text whatever it holds (`"\\boxed$" * k`, `"\\boxed{" * k`, ...).
    """
    starts, ends = array("q"), array("q")  # the markers, in machine integers: 16 bytes each whatever the text
    for match in _BOXED.finditer(text):
        starts.append(match.start())
        ends.append(match.end())
    if not starts:
        return []
    # One pass over the braces with a depth counter; only the braces that open a box are remembered.
    closing = array("q", [-1]) * len(ends)  # per marker: the index of the brace that closes its box
    open_markers, open_depths = array("q"), array("q")
    depth = marker = 0
    for brace in _BRACE.finditer(text):
        index = brace.start()
        if text[index] == "{":
            depth += 1
            while marker < len(ends) and ends[marker] < index:
                marker += 1
            if marker < len(ends) and ends[marker] == index:
                open_markers.append(marker)
                open_depths.append(depth)
        elif depth:
            if open_depths and open_depths[-1] == depth:
                open_depths.pop()
                closing[open_markers.pop()] = index
            depth -= 1
    boxes: list[tuple[int, int, int, int]] = []
    covered = 0  # the end of the last box taken: a marker before it lies inside that box
    for marker, (start, end) in enumerate(zip(starts, ends)):
        if start < covered:
            continue
        if text.startswith("{", end):
            if closing[marker] >= 0:
                boxes.append((start, end + 1, closing[marker], closing[marker] + 1))
                covered = closing[marker] + 1
        else:  # `\boxed 5`: the next token
            token = _BOX_TOKEN.match(text, end)
            if token:
                boxes.append((start, token.start(), token.end(), token.end()))
                covered = token.end()
    return boxes


def _command_before(text: str, index: int) -> tuple[str | None, int]:
    """The LaTeX command (letters after a backslash) that ends at `index`, and where its backslash stands; `(None,
    index)` when the letters there are a word."""
    start = index
    while start > 0 and index - start < _LOOK and text[start - 1].isascii() and text[start - 1].isalpha():
        start -= 1
    if 0 < start < index and text[start - 1] == "\\":
        return text[start:index], start - 1
    return None, index


def box_touches_operator(text: str, start: int, end: int) -> bool:
    """Whether a sign, an operator, a power, a digit or a LaTeX command that is no formatting stands next to a box
    (spaces, `$`, brackets and Markdown emphasis between allowed): `-\\boxed{5}`, `2\\boxed{5}`, `\\sqrt{\\boxed{25}}`,
    `\\boxed{5}^2`, `(\\boxed{5})^2`, `\\boxed{5}!`, `\\boxed{5}0`, `\\boxed{5} \\cdot 2`, `\\boxed{5} + 1`."""
    index, limit = start, max(0, start - _LOOK)
    while index > limit:  # before the box
        char = text[index - 1]
        if char in _BOX_SKIP or char in "([{":
            index -= 1
        elif text.startswith(("\\(", "\\["), index - 2):
            index -= 2
        elif char == "*":  # Markdown emphasis, unless it follows an operand (`2*\boxed{5}`)
            while index > limit and text[index - 1] == "*":
                index -= 1
            if index and (text[index - 1].isdigit() or text[index - 1] in ")]}"):
                return True
        elif char.isascii() and char.isalpha():
            command, command_start = _command_before(text, index)
            if command is None or command in _CONCLUSIONS:
                break  # a word ("is \\boxed{5}") or a conclusion ("\\therefore \\boxed{5}")
            if command not in _FORMATTING_COMMANDS:
                return True
            index = command_start
        else:
            previous = text[index - 2] if index >= 2 else ""
            if char.isnumeric() or char in "-+/^_|!~<>" or not neutral_before(char, previous):
                return True
            break
    index, limit = end, min(len(text), end + _LOOK)
    glued = True
    while index < limit:  # after the box
        char = text[index]
        if char in _BOX_SKIP or char in ")]}":
            index += 1
            glued = glued and char not in " \t\n"
        elif text.startswith(("\\)", "\\]"), index):
            index += 2
        elif char == "*":
            while index < limit and text[index] == "*":
                index += 1
            if index < len(text) and (text[index].isdigit() or text[index] in "({\\"):
                return True
        elif char == "\\":
            macro = _COMMAND.match(text, index, index + 40)
            name = macro.group(1) if macro else ""
            if name in _FORMATTING_COMMANDS or name in (",", ";", ":", " ", "!", "%", "\\", "$"):
                return False
            return True
        elif char in "+-":
            return _OPERAND_AFTER_SIGN.match(text, index, index + 8) is not None
        elif char == "!":
            return glued
        elif (
            char.isnumeric()
            or char in "^_'*/"
            or (char in ".," and index + 1 < len(text) and text[index + 1].isdigit())
        ):
            return True
        elif unicodedata.category(char) == "Sm" and char != "=":
            return True
        else:
            return False
    return False


def _render_fraction(match: re.Match[str]) -> str:
    """`\\frac{a}{b}` (and `\\frac12`, `\\dfrac`, `\\tfrac`, `\\cfrac[l]{a}{b}`, `\\sfrac`, `\\nicefrac`) as
    `a/b`, with brackets around arguments that are no plain number or letter, a space after a digit before it
    (`2\\frac{1}{2}` is the mixed number `2 1/2`) and a space before a digit after it (`\\frac{1}{2}3` is two
    numbers, not `1/23`)."""
    parts = [match.group(name).strip() for name in ("a", "b")]
    parts = [part[1:-1].strip() if part.startswith("{") else part for part in parts]
    sign = ""
    if all(_SIMPLE_ARGUMENT.fullmatch(part) and part[-1].isdigit() for part in parts):
        # Two numbers: the sign of the fraction goes in front (`\\frac{3}{-4}` is -3/4, `\\frac{-3}{-4}` 3/4).
        sign = "-" if sum(part.startswith("-") for part in parts) == 1 else ""
        parts = [part.lstrip("-") for part in parts]
    text = sign + "/".join(part if _SIMPLE_ARGUMENT.fullmatch(part) else f"({part})" for part in parts)
    before = match.string[match.start() - 1 : match.start()]
    after = match.string[match.end() : match.end() + 1]
    return (" " if before.isdigit() else "") + text + (" " if after.isdigit() or after == "." else "")


# Exact values that LaTeX writes without a number of the grammar (evaluated only when the result is a rational of at
# most MAX_DIGITS digits): a repeating decimal (`0.\\overline{3}` is 1/3, `0.1\\overline{6}` is 1/6; `\\bar`, `\\dot`
# too), a root of a perfect power (`\\sqrt{25}` is 5, `\\sqrt[3]{27}` 3, `\\sqrt{1/4}` 1/2; `\\sqrt{2}` stays a root,
# which is no number) and an integer power of a number (`2^3` is 8, `2^{-1}` 1/2, `10^{100}` too long: stays a power;
# `2^31` is LaTeX's 2³1, no power of two digits).
_REPEATING = re.compile(
    r"(?<![\w.])(?P<whole>[0-9]*)\.(?P<fixed>[0-9]*)\\(?:overline|bar|dot)\s*(?:\{\s*(?P<period>[0-9]+)\s*\}|(?P<digit>[0-9]))"
    r"(?![0-9])"
)
_ROOT = re.compile(
    r"\\sqrt\s*(?:\[\s*(?P<index>[0-9]{1,2})\s*\])?\s*"
    r"(?:\{\s*(?P<radicand>[0-9]+(?:\.[0-9]+)?(?:/[0-9]+)?)\s*\}|(?P<digit>[0-9])(?![0-9]))"
)
_POWER = re.compile(
    r"(?<![\w.^}])(?P<base>[0-9]+(?:\.[0-9]+)?)[ \t]*\^[ \t]*"
    r"(?:\{\s*(?P<exponent>[-+]?[0-9]{1,4})\s*\}|(?P<digit>[0-9])(?![0-9]))(?![ \t]*\^)"
)


def _digits(text: str) -> int:
    return sum(char.isdigit() for char in text)


def _rational(value: Fraction, match: re.Match[str]) -> str:
    """An exact value in the grammar's digits (`3`, `-1/2`), spaced from a digit beside it (`3\\sqrt{4}` is two
    numbers, not 32); the matched text when the value has more than MAX_DIGITS digits."""
    text = str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    if _digits(text) > MAX_DIGITS:
        return match.group(0)
    before = match.string[match.start() - 1 : match.start()]
    after = match.string[match.end() : match.end() + 1]
    return (" " if before.isdigit() else "") + text + (" " if after.isdigit() or after == "." else "")


def _repeating(match: re.Match[str]) -> str:
    whole, fixed = match.group("whole"), match.group("fixed")
    period = match.group("period") or match.group("digit")
    if _digits(match.group(0)) > MAX_DIGITS:
        return match.group(0)
    value = Fraction(int(whole or "0")) + Fraction(int(fixed or "0"), 10 ** len(fixed))
    value += Fraction(int(period), 10 ** len(fixed) * (10 ** len(period) - 1))
    return _rational(value, match)


def _integer_root(value: int, index: int) -> int | None:
    """The integer whose `index`-th power is `value` (a natural number), or `None`; by bisection, exact."""
    low, high = 0, 1 << (value.bit_length() // index + 1)
    while low < high:
        middle = (low + high) // 2
        if middle**index < value:
            low = middle + 1
        else:
            high = middle
    return low if low**index == value else None


def _root(match: re.Match[str]) -> str:
    radicand = match.group("radicand") or match.group("digit")
    index = int(match.group("index") or 2)
    if index < 2 or _digits(radicand) > MAX_DIGITS:
        return match.group(0)
    numerator, _, denominator = radicand.partition("/")
    if denominator and int(denominator) == 0:
        return match.group(0)
    value = Fraction(numerator) / Fraction(int(denominator or 1))
    top, bottom = _integer_root(value.numerator, index), _integer_root(value.denominator, index)
    return match.group(0) if top is None or bottom is None else _rational(Fraction(top, bottom), match)


def _power(match: re.Match[str]) -> str:
    base = Fraction(match.group("base"))
    exponent = int(match.group("exponent") or match.group("digit"))
    size = max(base.numerator, base.denominator).bit_length() * abs(exponent)
    if size > 4 * MAX_DIGITS or (base == 0 and exponent <= 0) or _digits(match.group("base")) > MAX_DIGITS:
        return match.group(0)  # far too long (2^{9999}), or undefined (0^0)
    return _rational(base**exponent, match)


def exact_values(text: str) -> str:
    """The text with LaTeX's exact values written as numbers: repeating decimals, roots of perfect powers and integer
    powers (see `_REPEATING`, `_ROOT`, `_POWER`); anything else is left as it is.

    Args:
        text: The text.

    Returns:
        The text, `0.\\overline{3}` -> `1/3`, `\\sqrt{25}` -> `5`, `2^3` -> `8`.
    """
    return _POWER.sub(_power, _ROOT.sub(_root, _REPEATING.sub(_repeating, text)))


def strip_latex(text: str) -> str:
    """Removes common LaTeX markup from an answer (`\\frac`, `\\text`, `\\left`, `\\$`, `{,}`, `^\\circ`, spacing).

    Args:
        text: The text, e.g. the content of a `\\boxed{...}`.

    Returns:
        The text with the markup replaced by plain text (`\\frac{3}{4}` and `\\frac34` -> `3/4`, `\\,` -> a space).
    """
    text = text.replace("{,}", ",").replace("\\$", "$").replace("\\%", "%")
    text = _LATEX_SPACE.sub(" ", text)
    for _ in range(4):  # nested \text{\frac{..}{..}} and the like
        new = _LATEX_TEXT.sub(r"\1", _LATEX_FRAC.sub(_render_fraction, exact_values(text)))
        if new == text:
            break
        text = new
    text = _LATEX_DROP.sub("", text)
    return text.strip()


class Sentences:
    """The sentences of a text (see `_BOUNDARY`), and whether each holds a qualifier, each read at most once."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.ends = array("q", (match.end() for match in _BOUNDARY.finditer(text)))
        self.qualified: dict[int, bool] = {}

    def index(self, position: int) -> int:
        return bisect.bisect_right(self.ends, position)

    def has_qualifier(self, start: int, end: int) -> bool:
        """Whether a sentence touched by `[start, end]` holds a qualifier."""
        for sentence in range(self.index(start), self.index(max(start, end - 1)) + 1):
            if sentence not in self.qualified:
                begin = self.ends[sentence - 1] if sentence else 0
                stop = self.ends[sentence] if sentence < len(self.ends) else len(self.text)
                self.qualified[sentence] = QUALIFIER.search(self.text, begin, stop) is not None
            if self.qualified[sentence]:
                return True
        return False


def mask_boxes(text: str, boxes: list[tuple[int, int, int, int]]) -> str:
    """The text with the contents of its boxes blanked (their own rules read them), the length unchanged."""
    parts, position = [], 0
    for _, content_start, content_end, _ in boxes:
        parts.append(text[position:content_start])
        parts.append(" " * (content_end - content_start))
        position = content_end
    parts.append(text[position:])
    return "".join(parts)
