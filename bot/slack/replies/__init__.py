"""A run's way into its thread: following it, streaming its reply, its status, what a workspace lacks."""
