"""llmhost: set up, serve, validate, benchmark and explain an SGLang + FlashInfer LLM service.

Folders follow the phases a user runs: setup (versions, model files) -> serve (launch spec, process control,
readiness, status) -> smoke (checks over the OpenAI API) -> bench (workloads -> arms -> points -> runner -> store)
-> report (the dashboard); fi holds the FlashInfer kernel benchmarks, the live trace and their report. Leaf modules
every phase uses: config, stats, client. Nothing here has side effects at import.
"""
