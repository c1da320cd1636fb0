from __future__ import annotations

from rest_framework.pagination import PageNumberPagination


class Pagination(PageNumberPagination):
    """Every list: `?page=N&page_size=M` (at most 200) → {count, next, previous, results}."""

    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200
