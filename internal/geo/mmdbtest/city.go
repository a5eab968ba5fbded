package mmdbtest

// City returns a GeoIP2-City-shaped record (the fields gdnsd's geoip plugin
// and azgate's geo package read): continent.code, country.iso_code,
// location.latitude/longitude, city.names.en and city.geoname_id, plus
// azgate's own azgate_region when region is not empty.
func City(region, continent, country, city string, geonameID uint32, lat, lon float64) Record {
	r := Record{
		"continent": Record{"code": continent, "names": Record{"en": continent}},
		"country":   Record{"iso_code": country, "names": Record{"en": country}},
		"location":  Record{"latitude": lat, "longitude": lon, "accuracy_radius": uint16(100)},
	}
	if city != "" {
		r["city"] = Record{"geoname_id": geonameID, "names": Record{"en": city}}
	}
	if region != "" {
		r["azgate_region"] = region
	}
	return r
}
