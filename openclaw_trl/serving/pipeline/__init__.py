"""The turn pipeline, protocol-free: a ``TurnRequest`` (``turn``) prepared (``prepare``: rendered, opened with
the collector), generated (``generation``), recorded (``recording``: parsed, log-probs, stored) or streamed
(``streaming``), all run by ``ChatService`` (``chat_service``); ``results``: what a turn reports."""
