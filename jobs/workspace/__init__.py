"""The task's working directory as Bridge sees it around a run: what it held and what changed (snapshots), and a git
worktree of its own when the task asked to be isolated (worktrees). No rows: callers store what these return."""
