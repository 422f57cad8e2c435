"""Fix a Python bug against a failing unit test (without touching the test).

easy    a one-token bug (wrong operator, min for max): read the module, then one sed fixes it
medium  a logic bug in a loop or a comparison
hard    several bugs in a stateful class or a pair of functions; hidden cases go beyond the visible test

The check runs the visible tests, hidden cases the visible tests do not show,
and verifies the test files are byte-for-byte unchanged.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from components.synthesize.draft import Draft, py_literal
from components.synthesize.families.phrasing import say
from components.synthesize.families.words import base_dir, name

__all__ = ["TAGS", "generate"]

TAGS = ["python", "debugging", "unittest"]


@dataclass(frozen=True)
class Bug:
    """A module with one planted bug. ``FN`` in every text is replaced by a random function name."""

    names: tuple[str, ...]
    fixed: str
    broken: str
    visible: str  # unittest method bodies, `self.assert...` lines
    hidden: str  # assert lines run by the check
    sed: str = ""  # a sed expression that repairs the module (easy bugs only)


EASY = [
    Bug(
        ("add", "plus", "combine"),
        "def FN(a, b):\n    return a + b\n",
        "def FN(a, b):\n    return a - b\n",
        "self.assertEqual(FN(2, 3), 5)",
        "assert FN(-4, 10) == 6 and FN(0, 0) == 0",
        "s/return a - b/return a + b/",
    ),
    Bug(
        ("largest", "biggest", "max_value"),
        "def FN(values):\n    return max(values)\n",
        "def FN(values):\n    return min(values)\n",
        "self.assertEqual(FN([3, 9, 4]), 9)",
        "assert FN([-5, -2, -9]) == -2",
        "s/min(values)/max(values)/",
    ),
    Bug(
        ("is_even", "even"),
        "def FN(n):\n    return n % 2 == 0\n",
        "def FN(n):\n    return n % 2 == 1\n",
        "self.assertTrue(FN(4))\n        self.assertFalse(FN(7))",
        "assert FN(0) and not FN(-3)",
        "s/n % 2 == 1/n % 2 == 0/",
    ),
    Bug(
        ("area", "rect_area", "surface"),
        "def FN(width, height):\n    return width * height\n",
        "def FN(width, height):\n    return width + height\n",
        "self.assertEqual(FN(3, 4), 12)",
        "assert FN(5, 0) == 0 and FN(7, 6) == 42",
        "s/width + height/width * height/",
    ),
]

MEDIUM = [
    Bug(
        ("sum_to", "triangle", "total_upto"),
        "def FN(n):\n    total = 0\n    for i in range(1, n + 1):\n        total += i\n    return total\n",
        "def FN(n):\n    total = 0\n    for i in range(1, n):\n        total += i\n    return total\n",
        "self.assertEqual(FN(4), 10)",
        "assert FN(1) == 1 and FN(100) == 5050 and FN(0) == 0",
    ),
    Bug(
        ("count_vowels", "vowels"),
        "def FN(text):\n    return sum(1 for ch in text.lower() if ch in 'aeiou')\n",
        "def FN(text):\n    return sum(1 for ch in text if ch in 'aeiou')\n",
        "self.assertEqual(FN('Apple'), 2)",
        "assert FN('AEIOU xyz') == 5 and FN('') == 0",
    ),
    Bug(
        ("clamp", "bound", "limit"),
        "def FN(x, lo, hi):\n    return max(lo, min(x, hi))\n",
        "def FN(x, lo, hi):\n    return max(lo, min(x, lo))\n",
        "self.assertEqual(FN(5, 0, 10), 5)",
        "assert FN(-3, 0, 10) == 0 and FN(42, 0, 10) == 10",
    ),
    Bug(
        ("median", "middle"),
        "def FN(values):\n    s = sorted(values)\n    n = len(s)\n    if n % 2:\n        return s[n // 2]\n"
        "    return (s[n // 2 - 1] + s[n // 2]) / 2\n",
        "def FN(values):\n    n = len(values)\n    if n % 2:\n        return values[n // 2]\n"
        "    return (values[n // 2 - 1] + values[n // 2]) / 2\n",
        "self.assertEqual(FN([3, 1, 2]), 2)",
        "assert FN([9, 1, 5, 3]) == 4 and FN([7]) == 7",
    ),
]

HARD = [
    Bug(
        ("Stack", "History"),
        "class FN:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        self.items.append(x)\n\n"
        "    def pop(self):\n        if not self.items:\n            raise IndexError('pop from empty')\n"
        "        return self.items.pop()\n\n    def peek(self):\n        return self.items[-1] if self.items else None\n\n"
        "    def __len__(self):\n        return len(self.items)\n",
        "class FN:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):\n        self.items.append(x)\n\n"
        "    def pop(self):\n        if not self.items:\n            return None\n        return self.items.pop(0)\n\n"
        "    def peek(self):\n        return self.items[0] if self.items else None\n\n"
        "    def __len__(self):\n        return len(self.items)\n",
        "s = FN()\n        s.push(1)\n        s.push(2)\n        self.assertEqual(s.pop(), 2)",
        "s = FN()\nfor i in range(5): s.push(i)\nassert s.peek() == 4 and s.pop() == 4 and len(s) == 4\n"
        "t = FN()\ntry:\n    t.pop()\n    raise SystemExit('pop on an empty FN must raise IndexError')\nexcept IndexError:\n    pass",
    ),
    Bug(
        ("LRUCache", "RecentCache"),
        "from collections import OrderedDict\n\n\nclass FN:\n    def __init__(self, capacity):\n"
        "        self.capacity = capacity\n        self.data = OrderedDict()\n\n    def get(self, key):\n"
        "        if key not in self.data:\n            return None\n        self.data.move_to_end(key)\n"
        "        return self.data[key]\n\n    def put(self, key, value):\n        self.data[key] = value\n"
        "        self.data.move_to_end(key)\n        while len(self.data) > self.capacity:\n"
        "            self.data.popitem(last=False)\n",
        "from collections import OrderedDict\n\n\nclass FN:\n    def __init__(self, capacity):\n"
        "        self.capacity = capacity\n        self.data = OrderedDict()\n\n    def get(self, key):\n"
        "        if key not in self.data:\n            return None\n        return self.data[key]\n\n"
        "    def put(self, key, value):\n        self.data[key] = value\n"
        "        while len(self.data) > self.capacity:\n            self.data.popitem(last=True)\n",
        "c = FN(2)\n        c.put('a', 1)\n        c.put('b', 2)\n        c.put('c', 3)\n        self.assertIsNone(c.get('a'))",
        "c = FN(2)\nc.put('a', 1)\nc.put('b', 2)\nc.get('a')\nc.put('c', 3)\n"
        "assert c.get('b') is None and c.get('a') == 1 and c.get('c') == 3\n"
        "d = FN(2)\nd.put('x', 1)\nd.put('y', 2)\nd.put('x', 5)\nd.put('z', 3)\nassert d.get('y') is None and d.get('x') == 5",
    ),
    Bug(
        ("word_counts", "tally_words"),
        'import re\n\n\ndef FN(text):\n    counts = {}\n    for w in re.findall(r"[a-z\']+", text.lower()):\n'
        "        counts[w] = counts.get(w, 0) + 1\n    return counts\n\n\ndef top_words(text, n):\n"
        "    counts = FN(text)\n    return sorted(counts, key=lambda w: (-counts[w], w))[:n]\n",
        "import re\n\n\ndef FN(text):\n    counts = {}\n    for w in text.split(' '):\n"
        "        counts[w] = counts.get(w, 1) + 1\n    return counts\n\n\ndef top_words(text, n):\n"
        "    counts = FN(text)\n    return sorted(counts, key=lambda w: (counts[w], w))[:n]\n",
        "self.assertEqual(FN('a b a'), {'a': 2, 'b': 1})",
        "assert FN('The cat, the HAT.') == {'the': 2, 'cat': 1, 'hat': 1}\n"
        "assert top_words('b a b c a b', 2) == ['b', 'a'] and top_words('y x', 5) == ['x', 'y']",
    ),
]


def _project(rng: random.Random, bug: Bug) -> Draft:
    fn = rng.choice(bug.names)
    project = f"{base_dir(rng)}/{name(rng)}"
    module = rng.choice(["core", "utils", "helpers", "ops", "lib", "tools"])
    path, test_path = f"{project}/{module}.py", f"{project}/tests/test_{module}.py"
    visible = bug.visible.replace("FN", fn)
    test_src = (
        f"import unittest\n\nfrom {module} import *  # noqa: F403\n\n\nclass Test{fn.title().replace('_', '')}(unittest.TestCase):\n"
        f"    def test_{fn.lower()}(self):\n        {visible}\n\n\nif __name__ == '__main__':\n    unittest.main()\n"
    )
    fixed, broken = bug.fixed.replace("FN", fn), bug.broken.replace("FN", fn)
    run_tests = f"cd {project} && python3 -m unittest discover -s tests"
    instruction, style, phrasings = say(
        rng,
        request=f"The unit tests of the Python project in {project} fail (run them with "
        f"`{run_tests}`). Find and fix the bug in {path} so the tests pass and the code is "
        "correct in general. Do not modify the tests.",
        report=f"CI for {project} went red after the last change: `{run_tests}` now fails, and "
        f"the problem is somewhere in {path}. Please fix the code there properly, not just enough "
        "for this one test (it has to be right for other inputs too), and leave the tests exactly "
        "as they are.",
        ticket=f"{project}: failing tests (`{run_tests}`). Fix bug(s) in {path}, correct for all "
        "inputs, not only the test. Do not edit tests/.",
    )
    # Which bug it is shows only in the module: the solution reads it first, as a careful agent would
    # (a demonstration then carries the module in its first observation).
    fix = f"sed -i '{bug.sed}' {path}" if bug.sed else f"cat > {path} <<'PYEOF'\n{fixed}PYEOF"
    solution = f"cat {path}\n{fix}"
    check = f"""
import hashlib
project = {project!r}
check(hashlib.sha256(read({test_path!r}, "rb")).hexdigest() == {hashlib.sha256(test_src.encode()).hexdigest()!r},
      "the test file was modified")
r = sh(f"cd {{project}} && python3 -m unittest discover -s tests")
check(r.returncode == 0, "the unit tests fail:\\n" + r.stderr[-2000:])
hidden = {py_literal(bug.hidden.replace("FN", fn))}
r = subprocess.run([sys.executable, "-c", "from {module} import *\\n" + hidden], cwd=project,
                   capture_output=True, text=True)
check(r.returncode == 0, "hidden cases fail:\\n" + r.stderr[-2000:])
"""
    return Draft(
        instruction=instruction,
        solution=solution,
        tags=[fn.lower()],
        setup_files={"module.py": broken, "test_module.py": test_src},
        setup_script=f"mkdir -p {project}/tests\ncp module.py {path}\ncp test_module.py {test_path}",
        check_py=check,
        metadata={"function": fn, "module": module, "phrasing": style, "phrasings": phrasings},
    )


def generate(rng: random.Random, difficulty: str) -> Draft:
    """One fix-the-bug task at ``difficulty``."""
    pool = {"easy": EASY, "medium": MEDIUM, "hard": HARD}[difficulty]
    return _project(rng, rng.choice(pool))
