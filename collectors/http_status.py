"""The closed set of HTTP status codes as label values: 100-599, as text.

One definition for every signals module that counts by status (engine rejections, gateway answers,
the serve's own counts): a value outside it is not a status, and is counted as unlisted.
"""

from __future__ import annotations

HTTP_STATUS_CODES: frozenset[str] = frozenset(str(code) for code in range(100, 600))
