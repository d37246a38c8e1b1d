"""Synthetic prompt/answer tasks of the toy world: additions, target numbers, debates over additions, and a
heterogeneous team of fact specialists."""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_DIGITS = re.compile(r"[0-9]+")





def _parse_int(text: str) -> int | None:
    """Parses a plain non-negative decimal integer.

    Args:
        text: The text, surrounding whitespace allowed.

    Returns:
        The integer, or ``None`` if ``text`` is anything else.
    """
    text = text.strip()
    return int(text) if _DIGITS.fullmatch(text) else None


def _shift_away(rng: random.Random, value: int, largest: int) -> int:
    """``value`` moved by a non-zero amount of at most ``largest``, never below zero (a noisy label)."""
    shift = rng.randint(1, largest) * rng.choice((-1, 1))
    return value - shift if value + shift < 0 else value + shift


@dataclass
class ToyTask:
    """Base class of the synthetic toy tasks: a source of (prompt, answer) pairs and a checker of answers."""

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one example.

        Args:
            rng: The random number generator to draw from.

        Returns:
            A ``(prompt, answer)`` pair of strings; the training target is ``answer``.
        """
        raise NotImplementedError(f"{type(self).__name__} is a ToyTask: it must define sample(rng)")

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether a completion correctly answers a prompt of this task.

        Args:
            prompt: A prompt produced by :meth:`sample`.
            completion: The generated answer (the text before the eos token).

        Returns:
            Whether the completion is a correct answer.
        """
        raise NotImplementedError(f"{type(self).__name__} is a ToyTask: it must define is_correct(prompt, completion)")

    def sample_prompts(self, n: int, rng: random.Random) -> list[str]:
        """Samples ``n`` prompts.

        Args:
            n: Number of prompts.
            rng: The random number generator to draw from.

        Returns:
            The prompts.
        """
        return [self.sample(rng)[0] for _ in range(n)]


@dataclass
class AdditionTask(ToyTask):
    """Addition of two non-negative integers: prompt ``"Q:{a}+{b}=A:"``, answer ``str(a + b)``.

    Attributes:
        max_operand: Both operands are drawn uniformly from ``[0, max_operand]``.
        noise_prob: Probability that a sampled training answer is wrong: shifted by a non-zero amount of at most
            ``noise_max`` (never below zero). Noisy labels leave a pretrained model room to improve with RL.
        noise_max: Largest absolute shift of a noisy answer.
    """

    max_operand: int = 99
    noise_prob: float = 0.0
    noise_max: int = 2

    _PATTERN = re.compile(r"Q:(\d+)\+(\d+)=A:")

    def __post_init__(self) -> None:
        """Validates the fields.

        Raises:
            ValueError: If a field is out of range.
        """
        if self.max_operand < 0:
            raise ValueError("max_operand must be >= 0")
        if not 0.0 <= self.noise_prob <= 1.0:
            raise ValueError("noise_prob must be in [0, 1]")
        if self.noise_max < 1:
            raise ValueError("noise_max must be >= 1")

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one addition problem (with a noisy answer with probability ``noise_prob``).

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        a = rng.randint(0, self.max_operand)
        b = rng.randint(0, self.max_operand)
        total = a + b
        if self.noise_prob > 0 and rng.random() < self.noise_prob:
            total = _shift_away(rng, total, self.noise_max)
        return f"Q:{a}+{b}=A:", str(total)

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion is the exact sum of the prompt's operands.

        Args:
            prompt: A prompt of the form ``"Q:{a}+{b}=A:"``.
            completion: The generated answer.

        Returns:
            Whether the completion is ``a + b`` written in decimal.
        """
        a, b = self.operands(prompt)
        return _parse_int(completion) == a + b

    def operands(self, prompt: str) -> tuple[int, int]:
        """Extracts the two operands of a prompt.

        Args:
            prompt: A prompt of the form ``"Q:{a}+{b}=A:"`` (possibly with surrounding text).

        Returns:
            The pair ``(a, b)``.

        Raises:
            ValueError: If the prompt does not contain an addition problem.
        """
        match = self._PATTERN.search(prompt)
        if match is None:
            raise ValueError(f"not an addition prompt: {prompt!r}")
        return int(match.group(1)), int(match.group(2))


@dataclass
class TargetNumberTask(ToyTask):
    """Output a random valid number for a target: prompt ``"T={t:02d}:"``, answer ``str(k)``, ``k ~ U[0, t]``.

    This teaches a model to output uniformly random valid numbers; it is the starting point of the two-agent
    coordination task in which two agents must pick numbers summing to ``t``.

    Attributes:
        targets: The targets ``t`` to draw from (uniformly), each in ``[0, 99]``.
    """

    targets: Sequence[int] = field(default_factory=lambda: (10,))

    _PATTERN = re.compile(r"T=(\d+):")

    def __post_init__(self) -> None:
        """Validates the targets.

        Raises:
            ValueError: If there are no targets or one is out of range.
        """
        self.targets = tuple(int(t) for t in self.targets)
        if not self.targets:
            raise ValueError("targets must not be empty")
        if any(not 0 <= t <= 99 for t in self.targets):
            raise ValueError("targets must be in [0, 99]")

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples a target and a uniformly random valid answer for it.

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        target = rng.choice(self.targets)
        return f"T={target:02d}:", str(rng.randint(0, target))

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion is a valid number for the prompt's target.

        Args:
            prompt: A prompt of the form ``"T={t:02d}:"``.
            completion: The generated answer.

        Returns:
            Whether the completion is an integer in ``[0, t]``.
        """
        value = _parse_int(completion)
        return value is not None and 0 <= value <= self.target(prompt)

    def target(self, prompt: str) -> int:
        """Extracts the target of a prompt.

        Args:
            prompt: A prompt of the form ``"T={t:02d}:"`` (possibly with surrounding text).

        Returns:
            The target ``t``.

        Raises:
            ValueError: If the prompt does not contain a target.
        """
        match = self._PATTERN.search(prompt)
        if match is None:
            raise ValueError(f"not a target prompt: {prompt!r}")
        return int(match.group(1))




# ---------------------------------------------------------------------------------------------------------------
# Debate
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class DebateAdditionTask(ToyTask):
    """Addition in the toy debate format of :class:`trl_marl.envs.debate.ToyDebateEnv`.

    With probability ``first_turn_prob`` the prompt is a first-turn prompt ``"Q:{a}+{b}=A:"``; otherwise it is a
    revision prompt ``"Q:{a}+{b}={x} {y} {z}?A:"`` that lists 1 to ``max_candidates`` candidate answers (the
    previous answers of a debate). Each candidate is correct with probability ``candidate_correct_prob``, else off
    by a non-zero amount of at most ``candidate_noise_max`` (never below zero). The answer is ``a + b`` whatever
    the candidates say, with label noise: with probability ``noise_prob`` it is shifted by a non-zero amount of at
    most ``noise_max``.

    A model pretrained on it answers first-turn prompts imperfectly (addition is hard for a tiny model, the labels
    are noisy) and learns that the candidates are evidence: copying a candidate is easy, so it answers revision
    prompts with a correct majority better than first-turn prompts, and a debate has something to correct.

    Attributes:
        max_operand: Both operands are drawn uniformly from ``[0, max_operand]``.
        noise_prob: Probability that a sampled training answer is wrong.
        noise_max: Largest absolute shift of a noisy answer.
        first_turn_prob: Probability of a first-turn prompt (no candidates).
        max_candidates: Largest number of candidates in a revision prompt (drawn uniformly from 1 to it).
        candidate_correct_prob: Probability that each candidate is the correct sum.
        candidate_noise_max: Largest absolute error of a wrong candidate.
    """

    max_operand: int = 99
    noise_prob: float = 0.0
    noise_max: int = 2
    first_turn_prob: float = 0.5
    max_candidates: int = 3
    candidate_correct_prob: float = 0.5
    candidate_noise_max: int = 2

    _PATTERN = re.compile(r"Q:(\d+)\+(\d+)=((?:[0-9-]+ ?)*)(?:\?)?A:")

    def __post_init__(self) -> None:
        """Validates the fields.

        Raises:
            ValueError: If a field is out of range.
        """
        if self.max_operand < 0:
            raise ValueError("max_operand must be >= 0")
        for name in ("noise_prob", "first_turn_prob", "candidate_correct_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.noise_max < 1 or self.candidate_noise_max < 1:
            raise ValueError("noise_max and candidate_noise_max must be >= 1")
        if self.max_candidates < 1:
            raise ValueError("max_candidates must be >= 1")

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one first-turn or revision prompt and its (possibly noisy) answer.

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        a = rng.randint(0, self.max_operand)
        b = rng.randint(0, self.max_operand)
        total = a + b
        if rng.random() < self.first_turn_prob:
            prompt = f"Q:{a}+{b}=A:"
        else:
            candidates = []
            for _ in range(rng.randint(1, self.max_candidates)):
                correct = rng.random() < self.candidate_correct_prob
                candidates.append(total if correct else _shift_away(rng, total, self.candidate_noise_max))
            prompt = f"Q:{a}+{b}=" + " ".join(str(c) for c in candidates) + "?A:"
        answer = total
        if self.noise_prob > 0 and rng.random() < self.noise_prob:
            answer = _shift_away(rng, total, self.noise_max)
        return prompt, str(answer)

    def parse(self, prompt: str) -> tuple[int, int, list[str]]:
        """Extracts the operands and the candidates of a prompt.

        Args:
            prompt: A first-turn or revision prompt (possibly with surrounding text).

        Returns:
            ``(a, b, candidates)``; ``candidates`` is empty for a first-turn prompt.

        Raises:
            ValueError: If the prompt is not a toy debate prompt.
        """
        match = self._PATTERN.search(prompt)
        if match is None:
            raise ValueError(f"not a toy debate prompt: {prompt!r}")
        return int(match.group(1)), int(match.group(2)), match.group(3).split()

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion is the exact sum of the prompt's operands (the candidates do not count).

        Args:
            prompt: A first-turn or revision prompt.
            completion: The generated answer.

        Returns:
            Whether the completion is ``a + b`` written in decimal.
        """
        a, b, _ = self.parse(prompt)
        return _parse_int(completion) == a + b


FACT_KEYS: tuple[int, ...] = tuple(range(10, 70))
"""The questions of the toy fact debate: two-digit keys whose tens digit (1-6) tells the specialty class."""


def fact_table(seed: int = 1234) -> dict[int, int]:
    """The toy world's facts: each key of [`FACT_KEYS`] has one true two-digit value (fixed by ``seed``)."""
    rng = random.Random(seed)
    return {key: rng.randint(10, 99) for key in FACT_KEYS}


def specialty_of(question: str | int, num_specialties: int = 3) -> int:
    """The specialty class of a toy fact question: ``(key // 10) % num_specialties``.

    It depends on the first digit of the key alone, so a tiny model can read it off one position of the prompt.

    Args:
        question: The key (``"37"``, ``37`` or a prompt ``"Q:37=..."``).
        num_specialties: Number of classes.

    Returns:
        The class index in ``[0, num_specialties)``.
    """
    match = re.search(r"(\d+)", str(question))
    if match is None:
        raise ValueError(f"not a toy fact question: {question!r}")
    return (int(match.group(1)) // 10) % num_specialties


@dataclass
class SpecialistFactsTask(ToyTask):
    """The toy debate format for one member of a *heterogeneous* team: an expert on some questions, a novice on others.

    A question is a key of [`FACT_KEYS`] and its answer the key's value in [`fact_table`] (``"Q:37=A:"`` ->
    ``"52"``). Keys fall into ``num_specialties`` classes by their first digit ([`specialty_of`]). The member knows
    every key of class ``specialty`` and a fixed random fraction ``novice_known_prob`` of the other keys (drawn once
    from ``table_seed`` and ``specialty``); for a key it does not know, its training answer is a fresh random two-digit
    number, so there is no hidden preference for the truth that reinforcement learning could merely sharpen. A team
    built with specialties ``0, 1, 2`` has one expert per question and two members who know it only sometimes: no
    single member is good at everything.

    Revision prompts ``"Q:37=52 18 52?A:"`` list ``num_candidates`` answers (a debate's previous turn: the member's own
    answer first, then the others'), each true with probability ``candidate_correct_prob``. Their training answer is
    one of the candidates, chosen uniformly, with probability ``copy_prob``, otherwise a fresh answer of the member's
    own knowledge. A pretrained member can therefore copy what it reads but does not know *whose* answer to
    trust; copying at random conserves the expected number of correct answers while it makes them correlated, so an
    untrained team's majority vote loses the benefit of independent voters turn after turn. What MAPoRL can teach it
    is to keep its own answer on its specialty and to adopt the expert's answer on the others.

    Attributes:
        specialty: The class this member is an expert on (`None`: none).
        num_specialties: Number of classes.
        novice_known_prob: Fraction of the keys outside its specialty that the member knows (1.0: every key).
        knowledge_seed: Seeds which of those keys it knows (give members without a specialty different seeds).
        first_turn_prob: Probability of a first-turn prompt (no candidates).
        num_candidates: Number of candidates in a revision prompt (the team size).
        candidate_correct_prob: Probability that each candidate is the true value.
        copy_prob: Probability that a revision prompt's answer copies a candidate.
        table_seed: Seed of [`fact_table`].
    """

    specialty: int | None = 0
    num_specialties: int = 3
    novice_known_prob: float = 0.4
    knowledge_seed: int = 0
    first_turn_prob: float = 0.5
    num_candidates: int = 3
    candidate_correct_prob: float = 0.5
    copy_prob: float = 0.5
    table_seed: int = 1234

    def __post_init__(self) -> None:
        """Validates the fields and builds the fact table.

        Raises:
            ValueError: If a field is out of range.
        """
        if self.specialty is not None and not 0 <= self.specialty < self.num_specialties:
            raise ValueError(f"specialty must be None or in [0, {self.num_specialties}), got {self.specialty}")
        for name in ("novice_known_prob", "first_turn_prob", "candidate_correct_prob", "copy_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")
        if self.num_candidates < 2:
            raise ValueError("num_candidates must be >= 2 (the member's own answer and at least one other)")
        self.table = fact_table(self.table_seed)
        chooser = random.Random(f"{self.table_seed}-{self.specialty}-{self.knowledge_seed}")
        self.known = {key for key in FACT_KEYS if chooser.random() < self.novice_known_prob
                      or specialty_of(key, self.num_specialties) == self.specialty}

    def _own_answer(self, rng: random.Random, key: int) -> int:
        return self.table[key] if key in self.known else rng.randint(10, 99)

    def sample(self, rng: random.Random) -> tuple[str, str]:
        """Samples one first-turn or revision prompt and its training answer.

        Args:
            rng: The random number generator to draw from.

        Returns:
            The ``(prompt, answer)`` pair.
        """
        key = rng.choice(FACT_KEYS)
        if rng.random() < self.first_turn_prob:
            return f"Q:{key}=A:", str(self._own_answer(rng, key))
        truth = self.table[key]
        candidates = [truth if rng.random() < self.candidate_correct_prob else rng.randint(10, 99)
                      for _ in range(self.num_candidates)]
        prompt = f"Q:{key}=" + " ".join(str(c) for c in candidates) + "?A:"
        if rng.random() < self.copy_prob:
            return prompt, str(rng.choice(candidates))
        return prompt, str(self._own_answer(rng, key))

    def is_correct(self, prompt: str, completion: str) -> bool:
        """Tells whether the completion states the key's true value.

        Args:
            prompt: A first-turn or revision prompt.
            completion: The generated answer.

        Returns:
            Whether the completion is the true value written in decimal.
        """
        match = re.match(r"Q:(\d+)=", prompt)
        if match is None:
            raise ValueError(f"not a toy fact prompt: {prompt!r}")
        return _parse_int(completion) == self.table[int(match.group(1))]
