from django.shortcuts import render


def queue(request):
    return render(request, "recovery/queue.html", {})
