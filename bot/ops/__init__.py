"""Operating the bot: metrics (:mod:`bot.ops.metrics`), the audit trail (:mod:`bot.ops.audit`), measuring a run's
work (:mod:`bot.ops.observe`), traces (:mod:`bot.ops.tracing`) and the ``/metrics`` / ``/healthz`` / ``/readyz``
endpoints (:mod:`bot.ops.server`)."""
