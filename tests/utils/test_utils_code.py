"""The one rule for the code of a model answer (`trl_marl.utils.code`), shared by the coding env and the unit tests.

Before the unification the coding environment took the first fenced block (any language when no Python one) and
dedented it, while the unit-test reward joined every Python block; these tests pin the single documented rule.
"""

from trl_marl.utils.code import build_humaneval_program, defines_function, extract_code, prompt_preamble

PROMPT = 'from typing import List\n\n\ndef add(a: int, b: int) -> int:\n    """Add two numbers."""\n'


def test_non_python_fences_hold_no_code():
    # the coding env used to fall back to the first block of another language: now no code, as for unit tests
    assert extract_code("```bash\nrm -rf /\n```") == ""
    assert extract_code("```text\nusage: f(x)\n```") == ""
    assert extract_code("```text\nusage\n```\n```py\nx = 1\n```") == "x = 1"


def test_all_python_blocks_are_joined_unless_one_defines_the_entry_point():
    text = "text\n```python\nx = 1\n```\nmore\n~~~\ny = 2\n~~~"
    assert extract_code(text) == "x = 1\n\ny = 2"
    two = "```python\ndef helper():\n    pass\n```\n```python\ndef f():\n    return 1\n```"
    assert extract_code(two, "f") == "def f():\n    return 1"
    assert extract_code(two, "missing") == "def helper():\n    pass\n\ndef f():\n    return 1"


def test_unfenced_text_and_cut_off_fences_and_chat_completions():
    assert extract_code("x = 1") == "x = 1"
    assert extract_code("\ndef f():\n    return 1\n\n") == "def f():\n    return 1"
    assert extract_code("    return a + b\n") == "    return a + b"  # a body keeps its indentation
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off by the length
    assert extract_code([{"role": "assistant", "content": "```py\nx = 2\n```"}]) == "x = 2"
    assert extract_code([]) == "" and extract_code(None) == ""
    assert extract_code("```python\r\nx = 1\r\n```") == "x = 1"
    # a fence is closed only by a fence on its own line: inline backticks inside the code stay code
    assert extract_code('```python\ns = "```"\nx = 1\n```') == 's = "```"\nx = 1'


def test_one_preamble_for_the_env_and_humaneval_programs():
    assert prompt_preamble(PROMPT, "add") == "from typing import List"
    assert prompt_preamble("import os\ndef f(:\n", "f") == "import os"
    whole = "def add(a: int, b: int) -> int:\n    return a + b\n"
    assert build_humaneval_program(PROMPT, f"```python\n{whole}```", "add") == "from typing import List\n\n\n" + whole
    # a helper defined after the signature is kept too (the old text-before-the-signature rule dropped it)
    prompt = PROMPT + "\n\ndef twice(x):\n    return 2 * x\n"
    assert "def twice" in build_humaneval_program(prompt, whole, "add")
    assert build_humaneval_program(PROMPT, "    return a + b\n", "add") == PROMPT + "    return a + b\n"
    assert defines_function("async def add(", "add") and not defines_function("def adder(", "add")
