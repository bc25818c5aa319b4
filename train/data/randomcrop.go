package data

import (
	"math"
	"math/rand/v2"
)

// RandomResizedCrop's ranges, torchvision's defaults: the crop covers
// 8–100% of the image's area, its aspect ratio (width/height) lies in
// 3/4–4/3, drawn uniformly on a log scale.
const (
	cropAreaMin, cropAreaMax   = 0.08, 1.0
	cropRatioMin, cropRatioMax = 3.0 / 4, 4.0 / 3
)

// randomResizedCrop draws the box torchvision's
// RandomResizedCrop.get_params draws from a width×height image: up to ten
// tries of an area fraction and a log aspect ratio, each uniform, kept
// when the box fits; after ten misses, the largest central box whose
// aspect ratio lies in the range. Sizes round as Python's round does (to
// even).
func randomResizedCrop(width, height int, r *rand.Rand) (left, top, w, h int) {
	area := float64(width * height)
	logMin, logMax := math.Log(cropRatioMin), math.Log(cropRatioMax)
	for range 10 {
		target := area * (cropAreaMin + (cropAreaMax-cropAreaMin)*r.Float64())
		ratio := math.Exp(logMin + (logMax-logMin)*r.Float64())
		w = int(math.RoundToEven(math.Sqrt(target * ratio)))
		h = int(math.RoundToEven(math.Sqrt(target / ratio)))
		if 0 < w && w <= width && 0 < h && h <= height {
			top = r.IntN(height - h + 1)
			left = r.IntN(width - w + 1)
			return left, top, w, h
		}
	}
	switch in := float64(width) / float64(height); {
	case in < cropRatioMin:
		w, h = width, int(math.RoundToEven(float64(width)/cropRatioMin))
	case in > cropRatioMax:
		w, h = int(math.RoundToEven(float64(height)*cropRatioMax)), height
	default:
		w, h = width, height
	}
	return (width - w) / 2, (height - h) / 2, w, h
}
