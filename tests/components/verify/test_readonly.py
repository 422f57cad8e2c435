"""Which solution steps only read: the ablation probe leaves them out, and only them."""

from __future__ import annotations

import pytest

from components.synthesize.families import FAMILIES
from components.synthesize.generate import make_task, task_seed
from components.verify.checks import ablation_plan
from components.verify.readonly import reads_only

LOOKS = [
    "grep -n '^\\[\\|^host' /etc/app/app.ini",
    "sed -n '/^\\[db\\]/,/^\\[/p' /etc/app/app.ini",
    "ls -la /srv/archive && find /var/spool -type f -name '*.log' -mtime +14 | wc -l",
    "du -ah /var/lib/app | sort -rh | head -n 10",
    'sleep 1; ps -p "$(cat /var/run/app/worker.pid)" -o pid,args',
    "cat /etc/passwd 2>/dev/null",
    "uniq -c counts.txt 2>/dev/null",
    "LC_ALL=C sort -u a.txt",
    "head -n 3 a.log >> /dev/null",
    "grep -c x < in.txt",
    "tar -tzf /root/conf.tar.gz",
    "crontab -l",
    "sqlite3 -readonly /data/app.db .schema",
]
ACTS = [
    "sed -i 's/a/b/' f",
    "sed -n 's/x/y/w out.txt' f",
    "find /tmp -name '*.tmp' -delete",
    "find . -type f -exec chmod 644 {} +",
    "cat a > b",
    "sort -o out.txt in.txt",
    "uniq in.txt out.txt",
    "echo hi &",
    "rm -f x",
    "ps -p $(rm x)",
    "grep x f | tee out",
    "cat <<EOF\nx\nEOF",
    "x=$(cat f)",
    "cd /srv && ls",  # cd changes the shell (the inert patterns' business, not this)
    "(cat a)",
    "cat `ls`",
    "grep 'unterminated",
    "tar -czf out.tar.gz dir",
    "tar -xf in.tar",
    "crontab -r",
    "crontab new.txt",
    "sqlite3 /data/app.db 'DELETE FROM t'",
]


@pytest.mark.parametrize("step", LOOKS)
def test_looking_steps_only_read(step: str):
    assert reads_only(step)


@pytest.mark.parametrize("step", ACTS)
def test_acting_or_unreadable_steps_count(step: str):
    assert not reads_only(step)


def test_every_medium_solution_keeps_its_acting_step():
    """A medium solution looks, acts and checks: the looks and checks only read, the act does not
    (so the ablation probe still removes it and the tests must notice)."""
    for family in FAMILIES:
        for index in range(3):
            task = make_task(family, "medium", task_seed(3, index))
            steps = [s for s in ablation_plan(task).steps if not s.strip().startswith("set ")]
            assert any(not reads_only(s) for s in steps), f"{family}: no step acts: {steps}"
