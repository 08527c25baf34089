"""`python -m llmhost.serve start|stop|restart|status|logs|dashboard|tunnel|print-command|running` (serve.sh)."""
from llmhost.serve.cli import main

raise SystemExit(main())
