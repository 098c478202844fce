"""The pure core: money, payment states, clarification, tokens, retry schedule, simulator rules.
No I/O and no clock reads here."""
