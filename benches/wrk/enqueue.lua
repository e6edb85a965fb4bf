local key = os.getenv("TESSERA_KEY")
wrk.method = "POST"
wrk.headers["Authorization"] = "Bearer " .. key
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"namespace":"bench","queue":"bench.q","kind":"verb.noop","effect_class":"read","producer_surface":"bench","brief":{}}'
