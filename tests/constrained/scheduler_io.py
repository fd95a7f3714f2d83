"""In-process stand-ins for the scheduler's ZMQ inbox and outbox in the grammar tests."""


class NoInbox:
    """Nothing ever arrives: the tests hand requests to the scheduler's handlers directly."""

    def recv(self, block=False):
        return []


class ListOutbox:
    def __init__(self):
        self.msgs = []

    def send(self, msg):
        self.msgs.append(msg)
