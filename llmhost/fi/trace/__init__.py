"""The live trace of FlashInfer's page tables inside the SGLang server: the in-server hook, the capture run that
drives traffic against it (and measures what the hook costs), and the analysis of what it recorded."""
