"""The catalog front: lakelock serves the Iceberg REST catalog and fences maintenance commits
(docs/catalog-front.md).

    service.catalog.pointers  the JdbcCatalog's tables in lakelock's database (pyiceberg's
                              SqlCatalog over the service's engine), and the pointer swap
    service.catalog.changes   what a commit is: maintenance, data or table; the lease it names;
                              the partitions it touches (read from its new manifests)
    service.catalog.front     the catalog's operations, each commit checked and swapped in one
                              transaction (service.lock.fence)

The HTTP routes are service.server.routes.catalog; they only translate.
"""
