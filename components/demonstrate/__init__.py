"""The demonstrate stage: each admitted task's golden solution replayed as an expert trajectory.

``python -m components.demonstrate`` (= ``termrl stage demonstrate``); the logic
is in ``stage.main`` (see ``stage.py``).
"""
