"""`python -m rlvr.sandbox`: what the sandbox can use on this machine."""

from rlvr.sandbox import main

raise SystemExit(main())
