"""The worker and its parts: dispatcher, held jobs, claim planner, slots, job
runner, completer, lease keeper, and the loops and host process that run them."""
