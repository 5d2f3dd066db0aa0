"""The worker's HTTP plumbing: kept-alive connections must not wait on Nagle's algorithm."""

import http.client
import json
import socket
import threading
import unittest
from http.server import ThreadingHTTPServer
from typing import List


from reins_worker.engine import Engine
from reins_worker.generation import GenerateScheduler
from reins_worker.server import make_handler


class ServerTest(unittest.TestCase):
    def test_connections_send_without_nagle_delay(self) -> None:
        engine = Engine()
        handler = make_handler(engine, GenerateScheduler(engine, 0.0, 1))
        seen: List[int] = []

        class Probe(handler):  # type: ignore[misc, valid-type]
            def setup(self) -> None:
                super().setup()
                seen.append(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

        server = ThreadingHTTPServer(("127.0.0.1", 0), Probe)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=10)
            for _ in range(3):  # one kept-alive connection, several requests
                conn.request("GET", "/health")
                res = conn.getresponse()
                self.assertEqual(res.status, 200)
                self.assertFalse(json.loads(res.read())["initialized"])
            conn.close()
        finally:
            server.shutdown()
            server.server_close()
        self.assertEqual(len(seen), 1, "the requests shared one connection")
        self.assertNotEqual(seen[0], 0, "TCP_NODELAY is set on the worker's connections")


if __name__ == "__main__":
    unittest.main()
