"""APIError: a request failure with its HTTP status, raised anywhere in the main process (routes,
TokenizerManager, run_generate) and answered as {"error": {...}} in OpenAI's shape.  No imports, so
the Engine path can raise it without the web stack."""


class APIError(Exception):
    """Answered as {"error": {...}} with this status; message names the problem."""

    def __init__(self, status: int, message: str, type: str = None, param: str = None, code: str = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or ("invalid_request_error" if status < 500 else "server_error")

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
