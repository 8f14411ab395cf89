"""Bridges that run obsbus's plug-ins inside other trainers, one module per host.

Each bridge only translates: it fills :class:`~obsbus.State` from the host's
objects and fires obsbus events through the same :class:`~obsbus.Engine`, so
every monitor and destination works unchanged. Import the bridge you use
(``obsbus.integrations.transformers``, ``.lightning``, ``.accelerate``); this
package imports none of them, and none of their hosts.
"""

__all__: list[str] = []
