"""`python -m spyglass.docs`: rewrite the generated reference docs."""

from spyglass.docs import main

main()
