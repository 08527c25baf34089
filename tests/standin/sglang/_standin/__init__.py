"""Internals of the SGLang stand-in: argv (args), tokens + prefix cache + scheduling (engine), OpenAI/native
response shapes (api), Prometheus text (metrics), the HTTP layer (server)."""
