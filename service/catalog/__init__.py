"""The catalog front: lakelock serves the Iceberg REST catalog and fences maintenance commits
(docs/catalog-front.md).

    service.catalog.pointers    the JdbcCatalog's tables in lakelock's database (pyiceberg's
                                SqlCatalog over the service's engine), the staging of a commit
                                and the pointer swap
    service.catalog.changes     what a commit is: maintenance, data or table; the lease it
                                names; the `Change` service.lock.fence judges
    service.catalog.manifests   the manifest lists and manifests a commit names, read bounded:
                                what each of its snapshots added and deleted
    service.catalog.partitions  the names of the partitions a commit touched, as lakelock's
                                scopes name them
    service.catalog.front       the catalog's operations, each commit checked and swapped in
                                one transaction (service.lock.fence)
    service.catalog.park        a commit a hold refuses, parked until the hold ends or the
                                park's time runs out

The HTTP routes are service.server.routes.catalog; they only translate.
"""
