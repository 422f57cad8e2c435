"""Near-duplicate instruction removal by shingled Jaccard similarity.

An instruction becomes the set of its word k-grams ("shingles", lowercase,
punctuation dropped except inside paths); two instructions whose Jaccard
similarity |A ∩ B| / |A ∪ B| reaches the threshold are near-duplicates and
only the first is kept. An inverted index (shingle → documents) finds the
candidates that share any shingle, so a new instruction is compared only
with those, not with the whole pool.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict

__all__ = ["NearDuplicateFilter", "jaccard", "shingles"]

_TOKEN = re.compile(r"[a-z0-9_./-]+")


def shingles(text: str, k: int = 3) -> frozenset[str]:
    """The word ``k``-grams of ``text`` (the whole token list if it is shorter than ``k``)."""
    tokens = _TOKEN.findall(text.lower())
    if len(tokens) <= k:
        return frozenset([" ".join(tokens)])
    return frozenset(" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    """|a ∩ b| / |a ∪ b| (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


class NearDuplicateFilter:
    """Admits an instruction unless an admitted one is at least ``threshold`` similar."""

    def __init__(self, threshold: float = 0.8, k: int = 3):
        self.threshold = threshold
        self.k = k
        self._docs: list[frozenset[str]] = []
        self._index: defaultdict[str, list[int]] = defaultdict(list)

    def __len__(self) -> int:
        return len(self._docs)

    def most_similar(self, text: str) -> float:
        """The highest similarity of ``text`` to any admitted instruction (0.0 if none)."""
        return self._best(shingles(text, self.k))

    def _best(self, sh: frozenset[str]) -> float:
        shared: Counter[int] = Counter()
        for s in sh:
            shared.update(self._index.get(s, ()))
        best = 0.0
        for doc, inter in shared.items():
            best = max(best, inter / (len(sh) + len(self._docs[doc]) - inter))
        return best

    def admit(self, text: str) -> bool:
        """Keep ``text`` (True) unless it is a near-duplicate of an admitted instruction (False)."""
        sh = shingles(text, self.k)
        if self._best(sh) >= self.threshold:
            return False
        doc = len(self._docs)
        self._docs.append(sh)
        for s in sh:
            self._index[s].append(doc)
        return True
