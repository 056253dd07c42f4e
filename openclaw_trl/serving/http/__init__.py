"""What every protocol's routes share: the key check and the caller's ``Tenant`` (``auth``), the bounded JSON
body (``body``) and the headers and SSE response of a turn's reply (``replies``)."""
