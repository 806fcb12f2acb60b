"""HTTP gateway: health, Prometheus metrics, the topic admin REST API and the users /
vhosts / permissions management API (twisted.web).

    site.py       build_site(doors=, admin=, topics=, pop=, metrics=, reactor=): the resource tree and the Site
    services.py   Services: the ports the site and its resources are built from
    request.py    the Request class: body size limit (checked before the body is read), JSON body
    resource.py   ApiResource: method dispatch, JSON errors, LogbusError -> HTTP status
    responses.py  Response and HttpError values, the status table for core error codes
    health.py     GET /healthz
    metrics.py    GET /metrics
    topics.py     /api/topics and /api/topics/<name>
    limits.py     /api/limits
    auth.py       HTTP Basic authentication of administrators for the management resources
    users.py      /api/users and /api/users/<name>
    vhosts.py     /api/vhosts and /api/vhosts/<name>
    permissions.py  /api/permissions and /api/permissions/<vhost>/<user>
    client.py     AdminClient: the same API from the outside (urllib, no Twisted), for the CLI

Importing this package does not import Twisted, so the CLI can use client.py cheaply.
"""
