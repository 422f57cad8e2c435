"""Shingles, Jaccard arithmetic and the near-duplicate filter."""

from __future__ import annotations

from components.synthesize.dedup import NearDuplicateFilter, jaccard, shingles


def test_shingles_are_word_trigrams_with_paths_kept_whole():
    assert shingles("Copy /app/a.txt to /tmp now!", 3) == frozenset(
        ["copy /app/a.txt to", "/app/a.txt to /tmp", "to /tmp now"]
    )
    assert shingles("Two words", 3) == frozenset(["two words"])


def test_jaccard_arithmetic():
    a, b = frozenset("abcd"), frozenset("cdef")
    assert jaccard(a, b) == 2 / 6  # |{c,d}| / |{a..f}|
    assert jaccard(a, a) == 1.0 and jaccard(frozenset(), frozenset()) == 1.0


def test_filter_rejects_near_duplicates_only():
    base = "Count the lines of /var/log/app.log that have the level ERROR and write the number to /root/a.txt"
    # 16 tokens → 14 trigrams; only the last trigram differs: J = 13 / (14 + 14 - 13) = 13/15 ≈ 0.867
    one_word = base.replace("/root/a.txt", "/root/b.txt")
    f = NearDuplicateFilter(threshold=0.85, k=3)
    assert f.admit(base)
    assert f.most_similar(one_word) == 13 / 15
    assert not f.admit(one_word)
    assert not f.admit(base.upper())  # case does not make a new task
    assert f.admit("Extract the archive /srv/x.tar.gz into /srv/out and list what it held")
    assert len(f) == 2
    strict = NearDuplicateFilter(threshold=0.9, k=3)
    assert strict.admit(base) and strict.admit(one_word)
