"""Evaluating agents: tasks in Harbor's layout, trials on throwaway emulators, checks over their state and journal,
and the harnesses' reliability figures (pass@1, pass^k)."""
