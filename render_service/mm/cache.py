"""Processed images, reused across requests: an LRU map bounded in bytes (thread-safe).

Keyed by a digest of the encoded image plus everything that changes processing (processor
kwargs, background colour, model), never by a client-chosen `uuid`, so one client cannot make
another's request use the wrong pixels. Items larger than the whole budget are not stored.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from render_service.mm.family import ProcessedImage

__all__ = ["ProcessedImageCache"]


class ProcessedImageCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = max(int(capacity_bytes), 0)
        self._items: OrderedDict[str, ProcessedImage] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> ProcessedImage | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return item

    def put(self, key: str, item: ProcessedImage) -> None:
        size = item.nbytes
        if size > self.capacity_bytes:
            return
        with self._lock:
            previous = self._items.pop(key, None)
            if previous is not None:
                self._bytes -= previous.nbytes
            self._items[key] = item
            self._bytes += size
            while self._bytes > self.capacity_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.nbytes
