"""The rollout stage: episodes in real sandboxes → trajectories + rollout metrics.

``python -m components.rollout`` (= ``termrl stage rollout``); the logic is in
``stage.main`` and the modules it calls (see ``stage.py``).
"""
